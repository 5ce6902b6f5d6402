"""Files written whole or not at all. Standard library only, `os` alone: the CLI's start-up path
(gpuctl/cli/entry.py, the help cache) imports this module."""

from __future__ import annotations

import os

PRIVATE = 0o600  # credentials, pid files, state: the owner's alone


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
