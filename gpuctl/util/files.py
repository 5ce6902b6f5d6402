"""Files written whole or not at all, and where gpuctl's cache is. Standard library only, `os` alone: the CLI's
start-up path (gpuctl/cli/entry.py, the help cache) imports this module."""

from __future__ import annotations

import os

PRIVATE = 0o600  # credentials, pid files, state: the owner's alone


def cache_root() -> str:
    """gpuctl's cache directory (tools, the help cache): $GPUCTL_CACHE_DIR, else $XDG_CACHE_HOME/gpuctl, else
    ~/.cache/gpuctl. A str, without pathlib, for the help cache; gpuctl.util.paths.cache_dir is its Path."""
    if custom := os.environ.get("GPUCTL_CACHE_DIR"):
        return custom
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "gpuctl")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = PRIVATE) -> None:
    """Write `data` (str: as UTF-8) to `path` through a temp file in the same directory and a rename
    (os.replace): a reader, or a run killed halfway, sees the old content or the new, never half of it.
    The temp file is made new (O_EXCL, a name no other writer uses) with permission bits `mode` (less
    the umask, as os.open applies it); it is removed again if anything fails. Not fsynced: after a power
    loss the file may still be the old one."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
