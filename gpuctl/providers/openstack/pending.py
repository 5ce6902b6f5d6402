"""Creates Magnum has accepted but not yet recorded, so a rerun waits for them instead of creating twice.

Magnum allows two clusters of one name (and checks node group names only against records already
written), and its record appears only once the conductor has acted (see waits.py). A gpuctl that
was interrupted right after a 202 would, on a rerun, find no record by name and create a second
one; name lookups would then answer 409. So each accepted create is noted here, by Magnum
endpoint, project and name, until its record is seen or it is too old to still appear.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpuctl.providers.openstack.waits import ACCEPT_TIMEOUT_S
from gpuctl.util.files import write_atomic
from gpuctl.util.paths import state_dir


class PendingCreates:
    """<state>/openstack/pending.json: {key: {"uuid": ..., "at": epoch seconds}}, mode 0600."""

    def __init__(self, scope: str, path: Path | None = None) -> None:
        self.scope = scope  # the Magnum endpoint and project: names are per project
        self.path = path or state_dir() / "openstack" / "pending.json"

    def _read(self) -> dict[str, dict[str, object]]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _write(self, doc: dict[str, dict[str, object]]) -> None:
        if not doc:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.path, json.dumps(doc))

    def _key(self, kind: str, name: str) -> str:
        return f"{self.scope} {kind} {name}"

    def get(self, kind: str, name: str) -> tuple[str, float] | None:
        """The uuid of an accepted create of `name` that may still appear, and the seconds left for it."""
        entry = self._read().get(self._key(kind, name))
        if not isinstance(entry, dict):
            return None
        left = ACCEPT_TIMEOUT_S - (time.time() - float(entry.get("at", 0)))  # type: ignore[arg-type]
        return (str(entry.get("uuid")), left) if left > 0 else None

    def put(self, kind: str, name: str, uuid: str) -> None:
        doc = self._read()
        doc[self._key(kind, name)] = {"uuid": uuid, "at": time.time()}
        self._write(doc)

    def drop(self, kind: str, name: str) -> None:
        doc = self._read()
        if doc.pop(self._key(kind, name), None) is not None:
            self._write(doc)
