"""Shared helpers: run the real `gpuctl` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_gpuctl(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture
def isolated_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose gpuctl state, tool cache and kubeconfig are all empty temp dirs."""
    return dict(
        os.environ,
        GPUCTL_STATE_DIR=str(tmp_path / "state"),
        GPUCTL_CACHE_DIR=str(tmp_path / "cache"),
        KUBECONFIG=str(tmp_path / "kube" / "config"),
        PATH="/usr/bin:/bin",  # no Go, no tools: nothing could be installed or started
    )
