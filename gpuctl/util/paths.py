"""Where gpuctl keeps its per-user cache (built tools) and state (sim clusters)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuctl.util.errors import UsageError, shown
from gpuctl.util.files import cache_root


def cache_dir() -> Path:
    """Tools cache, keyed by version; survives fresh clones so only the first run builds (files.cache_root)."""
    return Path(cache_root())


def state_dir() -> Path:
    """Sim clusters: their processes' work dirs, records and kubeconfigs."""
    if custom := os.environ.get("GPUCTL_STATE_DIR"):
        return Path(custom)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gpuctl"


# Linux file systems that hold no files of a user's: a path under one of them cannot be created, whatever
# access(2) answers for root (`mkdir /proc/x` fails with ENOENT).
PSEUDO_FILE_SYSTEMS = frozenset({
    "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts", "efivarfs", "fusectl",
    "hugetlbfs", "mqueue", "nsfs", "proc", "pstore", "rpc_pipefs", "securityfs", "selinuxfs", "sysfs", "tracefs"})
MAX_PATH_BYTES = 4095  # PATH_MAX less the terminating NUL
MAX_NAME_BYTES = 255  # NAME_MAX: one component


def check_path_text(text: str, field: str) -> str:
    """A path as typed: not empty (an empty one is not the current directory), printable, within PATH_MAX
    and NAME_MAX. The one rule for every path flag (gpuctl.cli.types.path parses with it)."""
    hint = "pass a path of printable characters"
    if not text:
        raise UsageError(field, "an empty path", "pass a path, or leave the flag out")
    if not text.isprintable():
        raise UsageError(field, f"{shown(text)} has control characters", hint)
    encoded = os.fsencode(text) if _encodes(text) else None
    if encoded is None:
        raise UsageError(field, f"{shown(text)} is not valid text", hint)
    if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise UsageError(field, f"{shown(text)} is too long",
                         f"use at most {MAX_PATH_BYTES} bytes, {MAX_NAME_BYTES} per directory or file name")
    return text


def _encodes(text: str) -> bool:
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


def check_file_path(path: Path, field: str) -> None:
    """A file flag that may be read or written (`--kubeconfig`): an existing regular file, or one that
    check_target says can be made."""
    check_path_text(str(path), field)
    try:
        mode = path.stat().st_mode
    except OSError:
        check_target(path, field)  # not there (or not reachable): it must be creatable, else says why not
        return
    if not stat.S_ISREG(mode):
        raise UsageError(field, f"{path} is not a regular file", "pass a file")


def check_target(path: Path, field: str, directory: bool = False) -> None:
    """Before anything is written: gpuctl can write `path`, a file (written whole, or replaced through a
    temporary file beside it), or with `directory` a directory it writes files into. What exists must be
    of that kind and writable; what does not must be creatable: its nearest existing ancestor a writable
    directory on a file system that holds files. Refused with a UsageError naming `field`."""
    check_path_text(str(path), field)

    def refuse(reason: str) -> None:
        raise UsageError(field, f"cannot write {path}: {reason}", f"pass {field} with a path you can write"
                         if field.startswith("-") else f"set {field} to a path you can write")

    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        refuse(exc.strerror or type(exc).__name__)
    if mode is None:
        if path.is_symlink():
            refuse("it is a symbolic link to nothing")
        place = path.parent
        while not os.path.lexists(place) and place != place.parent:
            place = place.parent
    else:
        if directory and not stat.S_ISDIR(mode):
            refuse("it is not a directory")
        if not directory and not stat.S_ISREG(mode):
            refuse("it is not a regular file")
        place = path if directory else path.parent
    if not place.is_dir():
        refuse(f"{place} is not a directory")
    kind = file_system_type(place)
    if kind in PSEUDO_FILE_SYSTEMS:
        refuse(f"{place} is on a {kind} file system, which holds no files")
    if mode is not None and not os.access(path, os.W_OK | (os.X_OK if directory else 0)):
        refuse("permission denied")
    if not os.access(place, os.W_OK | os.X_OK):
        refuse(f"{place} is not writable")


def file_system_type(path: Path) -> str | None:
    """The type of the file system `path` is on (its mount with the longest matching mount point), from
    /proc/self/mountinfo; None where that cannot be read (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        fields = line.split(" ")
        try:
            point = fields[4].encode().decode("unicode_escape")  # octal escapes: \040 is a space
            fs_type = fields[fields.index("-", 6) + 1]
        except (IndexError, ValueError, UnicodeDecodeError):
            continue
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fs_type
    return kind
