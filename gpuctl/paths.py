"""Where gpuctl keeps its per-user cache (built tools) and state (sim clusters)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Tools cache, keyed by version; survives fresh clones so only the first run builds."""
    if custom := os.environ.get("GPUCTL_CACHE_DIR"):
        return Path(custom)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuctl"


def state_dir() -> Path:
    """Sim clusters: their processes' work dirs, records and kubeconfigs."""
    if custom := os.environ.get("GPUCTL_STATE_DIR"):
        return Path(custom)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gpuctl"
