"""Kubeconfig files: read bounded and strictly, and written the way kubectl and eksctl do, by
merging one cluster's entries into the file (the default one or `--kubeconfig FILE`) and keeping
every other context in it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.model.strict_yaml import read_yaml
from gpuctl.util.errors import ExitCode, GpuctlError, UsageError, shown
from gpuctl.util.files import write_atomic
from gpuctl.util.paths import check_target

_SECTIONS = ("clusters", "users", "contexts")
MAX_BYTES = 8 << 20  # embedded certificates of many clusters fit; a runaway file does not
FIELD = "--kubeconfig"
CREATE_OR_PICK = "create one with 'gpuctl cluster create' or pick one with --context NAME"
LISTED_CONTEXTS = 5  # contexts named in the error for a --context the kubeconfig lacks


class NoClusterSelected(GpuctlError):
    """No kubeconfig, none of its contexts current, or a current one naming entries the file lacks: a command
    that talks to a cluster has none to talk to (a usage error: the fix is a flag or a create)."""

    exit_code = ExitCode.USAGE

    def __init__(self, why: str) -> None:
        super().__init__(f"no cluster selected: {why}", CREATE_OR_PICK)


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


def _merged(files: list[Path]) -> dict[str, Any]:
    """The files read as one, as kubectl merges $KUBECONFIG: the first entry of a name wins, and the first
    current-context set."""
    merged: dict[str, Any] = {section: {} for section in _SECTIONS}
    merged["current-context"] = ""
    for path in files:
        doc = read_kubeconfig(path)
        for section in _SECTIONS:
            for item in doc.get(section) or []:
                merged[section].setdefault(item["name"], item.get(section[:-1]))
        merged["current-context"] = merged["current-context"] or doc.get("current-context") or ""
    return merged


def check_selected(path: Path | None, context: str | None) -> list[Path]:
    """The kubeconfig a client of `path` reads (else $KUBECONFIG, else ~/.kube/config), read strictly, selects
    a cluster: `context` (else its current context) is one of its contexts, and the cluster that names is in
    it. A named context that is missing is a --context error listing those there are; no selection at all is
    NoClusterSelected, naming `gpuctl cluster create` and --context. Returns the files read."""
    files = [p for p in read_paths(path) if p.exists()]
    where = ", ".join(str(p) for p in files) or str(path or default_path())
    if not files:
        raise NoClusterSelected(f"there is no kubeconfig at {where}")
    doc = _merged(files)
    contexts = doc["contexts"]
    if context is None:
        context = doc["current-context"]
        if not context:
            raise NoClusterSelected(f"the kubeconfig {where} has no current context")
        if context not in contexts:
            raise NoClusterSelected(f"the current context {shown(context)} of {where} is not one of its contexts")
    elif context not in contexts:
        names = sorted(contexts)
        listed = ", ".join(names[:LISTED_CONTEXTS]) + (f" (and {len(names) - LISTED_CONTEXTS} more)"
                                                       if len(names) > LISTED_CONTEXTS else "")
        raise UsageError("--context", f"no context {shown(context)} in {where}",
                         f"contexts there: {listed}" if names else
                         "it has none: create one with 'gpuctl --context NAME cluster create'")
    entry = contexts[context]
    cluster = entry.get("cluster") if isinstance(entry, dict) else None
    if not isinstance(cluster, str) or cluster not in doc["clusters"]:
        raise NoClusterSelected(f"context {shown(context)} of {where} names cluster {shown(cluster)}, which it "
                                "does not hold (deleted?)")
    return files


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


@dataclass(frozen=True)
class Removed:
    """What remove_cluster took out of a kubeconfig."""

    path: Path
    contexts: list[str]
    was_current: bool  # one of them was the current context: none is current now


def remove_cluster(cluster: str, path: Path | None = None) -> Removed | None:
    """Remove what gpuctl merged in for cluster entry `cluster`: every context that points at it, whatever
    its name (the provider's, or the one --context gave at create), the cluster entry, and the users only
    those contexts named. Where one of them was current, no context is current afterwards (eksctl does
    the same; a current-context naming nothing would fail every later command). None: nothing to remove."""
    target = path or default_path()
    if not target.exists():
        return None
    doc = _load(target)
    contexts = doc.get("contexts") or []
    gone = [c for c in contexts if isinstance(c.get("context"), dict) and c["context"].get("cluster") == cluster]
    kept = [c for c in contexts if c not in gone]
    if not gone and not any(c.get("name") == cluster for c in doc.get("clusters") or []):
        return None
    users = {c["context"].get("user") for c in gone} - {c["context"].get("user") for c in kept
                                                         if isinstance(c.get("context"), dict)}
    doc["contexts"] = kept
    doc["clusters"] = [c for c in doc.get("clusters") or [] if c.get("name") != cluster]
    doc["users"] = [u for u in doc.get("users") or [] if u.get("name") not in users]
    names = [c["name"] for c in gone]
    was_current = doc.get("current-context") in names
    if was_current:
        doc["current-context"] = ""
    _write(target, doc)
    return Removed(target, names, was_current)
