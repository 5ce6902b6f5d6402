"""Write cluster credentials the way eksctl does: a standalone file, or merged into the default."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

_SECTIONS = ("clusters", "users", "contexts")


def default_path() -> Path:
    """The file kubectl writes to: the first entry of $KUBECONFIG, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    return yaml.safe_load(path.read_text()) or {}


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Atomic write with mode 0600: credentials inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(doc, handle, default_flow_style=False, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_kubeconfig(entry: dict[str, Any], path: Path | None) -> tuple[Path, bool]:
    """Write `entry` (a one-context kubeconfig) to `path`, or merge it into the default file.

    Either way its context becomes current and entries with the same names are replaced.
    Returns the file and whether it changed (an identical file is not rewritten).
    """
    target = path or default_path()
    before = _load(target) if target.exists() else None
    doc = dict(before) if path is None and before else {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    for section in _SECTIONS:
        names = {item["name"] for item in entry[section]}
        kept = [item for item in doc.get(section) or [] if item.get("name") not in names]
        doc[section] = kept + entry[section]
    doc["current-context"] = entry["current-context"]
    if doc == before and (target.stat().st_mode & 0o777) == 0o600:
        return target, False
    _write(target, doc)
    return target, True


def remove_context(context: str, path: Path | None = None) -> bool:
    """Remove a context and the cluster and user it names; return True if anything changed."""
    target = path or default_path()
    if not target.exists():
        return False
    doc = _load(target)
    ctx = next((c for c in doc.get("contexts") or [] if c.get("name") == context), None)
    if ctx is None:
        return False
    drop = {"contexts": context, "clusters": ctx["context"].get("cluster"), "users": ctx["context"].get("user")}
    for section in _SECTIONS:
        doc[section] = [item for item in doc.get(section) or [] if item.get("name") != drop[section]]
    if doc.get("current-context") == context:
        doc["current-context"] = ""
    _write(target, doc)
    return True
