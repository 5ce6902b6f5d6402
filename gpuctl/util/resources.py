"""Locate the data directories shipped with gpuctl (templates/, nodepools/)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # gpuctl/


def data_dir(name: str) -> Path:
    """Return the directory `name` (e.g. "templates") from a wheel install or a source checkout.

    A wheel carries it as gpuctl/_data/<name>; an editable install or a checkout reads it from
    the repository root, where it is maintained.
    """
    packaged = _PACKAGE_DIR / "_data" / name
    if packaged.is_dir():
        return packaged
    source = _PACKAGE_DIR.parent / name
    if source.is_dir():
        return source
    raise FileNotFoundError(f"gpuctl data directory {name!r} not found under {_PACKAGE_DIR}")
