"""The bed's own virtualenv (Keystone + Magnum from PyPI), cached by the hash of requirements.txt.

It holds PyPI packages only, never code of this checkout (CI runs from clean clones elsewhere): the
bed puts a per-run directory on its processes' PYTHONPATH instead (see bed.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.util import cache_dir

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
PIP_TIMEOUT_S = 1800.0
MARKER = ".complete"  # written last: a directory without it was never finished


def bed_venv_path() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return cache_dir() / "tools" / f"openstack-bed-{digest}"


def bed_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_bed_venv(progress=print) -> Path:
    """The bed's virtualenv, made on first use: `python -m venv` + `pip install -r requirements.txt`
    in a temp dir beside it, renamed into place once complete (an interrupted install is never reused;
    two sessions racing both build, the first rename wins)."""
    dest = bed_venv_path()
    if (dest / MARKER).exists() and bed_python(dest).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    progress(f"building the OpenStack bed venv {dest} (keystone + magnum from PyPI; once per requirements.txt)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True)
        # Scripts' shebangs name the temp path: run tools as `python -m`, never by their scripts.
        proc = subprocess.run([str(bed_python(tmp)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "-r", str(REQUIREMENTS)], capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install for the OpenStack bed failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        (tmp / MARKER).write_text(REQUIREMENTS.read_text())
        if dest.exists():  # a stale incomplete one, or a racing build that finished first
            if (dest / MARKER).exists():
                return dest
            shutil.rmtree(dest)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / MARKER).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"  built in {time.monotonic() - started:.0f}s")
    return dest
