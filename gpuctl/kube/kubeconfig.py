"""Kubeconfig files: read bounded and strictly, and written the way kubectl and eksctl do, by
merging one cluster's entries into the file (the default one or `--kubeconfig FILE`) and keeping
every other context in it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from gpuctl.model.strict_yaml import read_yaml
from gpuctl.util.errors import UsageError
from gpuctl.util.files import write_atomic

_SECTIONS = ("clusters", "users", "contexts")
MAX_BYTES = 8 << 20  # embedded certificates of many clusters fit; a runaway file does not
FIELD = "--kubeconfig"


def default_path() -> Path:
    """The file kubectl writes to: the first entry of $KUBECONFIG, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def read_paths(path: Path | None) -> list[Path]:
    """The files a client would read: `path`, else every existing entry of $KUBECONFIG, else ~/.kube/config."""
    if path is not None:
        return [path]
    env = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [p for p in env if p.exists()] if env else [Path.home() / ".kube" / "config"]


def read_kubeconfig(path: Path) -> dict[str, Any]:
    """A kubeconfig read strictly (size cap, UTF-8, no aliases, no duplicate keys) and shape-checked."""
    doc = read_yaml(path, FIELD, MAX_BYTES)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UsageError(FIELD, f"{path} is not a kubeconfig (not a mapping)", "fix or replace the file")
    for section in _SECTIONS:
        items = doc.get(section)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                                                  for i in items):
            raise UsageError(FIELD, f"{path}: {section} must be a list of named entries", "fix or replace the file")
    if not isinstance(doc.get("current-context", ""), (str, type(None))):
        raise UsageError(FIELD, f"{path}: current-context must be a string", "fix or replace the file")
    return doc


def check_kubeconfig(path: Path | None) -> None:
    """Before anything is started: every kubeconfig gpuctl would read is sound, and the one it would
    write can be written (paths.check_target: an existing one a regular file, a new one creatable, its
    directory writable on a file system that holds files); an existing one must be a kubeconfig."""
    from gpuctl.util.paths import check_target

    # Named as the user gave it: the flag, or the variable the default file comes from.
    from_env = path is None and any(os.environ.get("KUBECONFIG", "").split(os.pathsep))
    check_target(path or default_path(), "$KUBECONFIG" if from_env else FIELD)
    for candidate in read_paths(path):
        if candidate.exists() or candidate.is_symlink():
            read_kubeconfig(candidate)


def current_context(path: Path | None) -> str | None:
    """The context a client of `path` (else $KUBECONFIG, else ~/.kube/config) uses without --context: the first
    current-context set in the files it reads, as kubectl merges them."""
    for candidate in read_paths(path):
        if candidate.exists():
            context = read_kubeconfig(candidate).get("current-context")
            if context:
                return str(context)
    return None


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    return read_kubeconfig(path)


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Atomic write with mode 0600: credentials inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, yaml.safe_dump(doc, default_flow_style=False, sort_keys=False))


def named(entry: dict[str, Any], context: str | None) -> dict[str, Any]:
    """`entry` (a one-context kubeconfig) with its context called `context` (cluster and user keep their names)."""
    if not context:
        return entry
    [item] = entry["contexts"]
    return {**entry, "contexts": [{**item, "name": context}], "current-context": context}


def write_kubeconfig(entry: dict[str, Any], path: Path | None) -> tuple[Path, bool]:
    """Merge `entry` (a one-context kubeconfig) into `path`, or into the default file.

    Its context becomes current; entries with the same names are replaced, all others are kept.
    Returns the file and whether it changed (an identical file is not rewritten).
    """
    target = path or default_path()
    before = _load(target) if target.exists() else None
    doc: dict[str, Any] = dict(before) if before else {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    for section in _SECTIONS:
        names = {item["name"] for item in entry[section]}
        kept = [item for item in doc.get(section) or [] if item.get("name") not in names]
        doc[section] = kept + entry[section]
    doc["current-context"] = entry["current-context"]
    if doc == before and (target.stat().st_mode & 0o777) == 0o600:
        return target, False
    _write(target, doc)
    return target, True


def remove_context(context: str, path: Path | None = None, cluster: str | None = None) -> bool:
    """Remove a context and the cluster and user it names; return True if anything changed.
    With `cluster`, only a context that points at that cluster entry (one gpuctl wrote) is removed."""
    target = path or default_path()
    if not target.exists():
        return False
    doc = _load(target)
    ctx = next((c for c in doc.get("contexts") or [] if c.get("name") == context), None)
    if ctx is None or not isinstance(ctx.get("context"), dict):
        return False
    if cluster is not None and ctx["context"].get("cluster") != cluster:
        return False
    drop = {"contexts": context, "clusters": ctx["context"].get("cluster"), "users": ctx["context"].get("user")}
    for section in _SECTIONS:
        doc[section] = [item for item in doc.get(section) or [] if item.get("name") != drop[section]]
    if doc.get("current-context") == context:
        doc["current-context"] = ""
    _write(target, doc)
    return True
