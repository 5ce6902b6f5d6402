"""Which create or apply did not finish: `cluster list` shows its cluster as `incomplete` until a run of it
completes.

A cloud (or the sim's `gpuctl-created` marker) knows when its cluster exists, not whether the platform on it
(node groups, kubeconfig, GPU stack, tenants, validation) was finished: a run stopped by Ctrl-C, a kill or an
error during install-gpu-operator leaves a running cluster without one. The record is one small file per
cluster in gpuctl's state dir, <state>/unfinished/<cloud>/<name>, holding the step the run was in: written
before the first step and at each step, removed by a run that completed every step, and by `cluster delete`.
It is this machine's record: a run elsewhere is not seen.
"""

from __future__ import annotations

from pathlib import Path

from gpuctl.util.files import write_atomic
from gpuctl.util.paths import state_dir


def _path(cloud: str, name: str) -> Path:
    return state_dir() / "unfinished" / cloud / name


def record_step(cloud: str, name: str, step: str) -> None:
    """A run on cluster `name` is in `step` (and unfinished until forget_unfinished)."""
    path = _path(cloud, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"{step}\n")


def forget_unfinished(cloud: str, name: str) -> None:
    """A run completed every step, or the cluster was deleted."""
    _path(cloud, name).unlink(missing_ok=True)


def unfinished_step(cloud: str, name: str) -> str | None:
    """The step the last unfinished run on cluster `name` was in; None when the last run completed."""
    try:
        return _path(cloud, name).read_text().strip() or "?"
    except (FileNotFoundError, NotADirectoryError):
        return None
