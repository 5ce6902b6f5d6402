"""Console entry point. `gpuctl --version` and every `gpuctl [COMMAND...] --help` answer before typer loads.

Importing typer alone costs ~50 ms, as much as a Go CLI's whole start-up. The first `--help` after
an install or an edit renders the help of every command with typer and stores it in one file;
later ones read it from there. The file is keyed by what the text depends on: gpuctl's version,
the help width, Python, the stamps (mtime and size) of typer (or click) and of every gpuctl
module. Without a writable cache directory each `--help` is rendered by typer, as before.
This module imports nothing beyond os, sys, zlib and gc (and gpuctl.util.files: os alone) on that path.
"""

from __future__ import annotations

import gc
import io
import os
import sys
import zlib

from gpuctl import __version__
from gpuctl.util.files import cache_root, write_atomic

_HELP_FLAGS = ("--help", "-h")
_KEEP = 8  # help files kept in the cache directory
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def help_width() -> int:
    """The width click wraps help at: the terminal's columns (as shutil finds them) up to 80, less 2, at least 50."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return max(min(columns or 80, 80) - 2, 50)


def help_path(args: list[str]) -> str | None:
    """`cluster create` for `gpuctl cluster create --help`; None for a command line that is not only words and --help."""
    if not args or args[-1] not in _HELP_FLAGS:
        return None
    words = args[:-1]
    if any(not word or word.startswith("-") or len(word.split()) != 1 for word in words):
        return None  # options, or a word with spaces: typer decides
    return " ".join(words)


def _stamps(top: str) -> list[str]:
    out = []
    for entry in sorted(os.scandir(top), key=lambda e: e.name):
        if entry.is_dir() and entry.name not in ("__pycache__", "_data"):
            out += _stamps(entry.path)
        elif entry.name.endswith(".py"):
            stat = entry.stat()
            out.append(f"{entry.path[len(_PACKAGE):]}:{stat.st_mtime_ns}:{stat.st_size}")
    return out


def _framework_stamps() -> list[str]:
    out = []
    for name in ("typer", "click"):
        for directory in sys.path:
            try:
                stat = os.stat(os.path.join(directory or ".", name, "__init__.py"))
            except OSError:
                continue
            out.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
            break
    return out


def help_key() -> str:
    """Everything the help text depends on, except the width: the cache file holds this line first."""
    return " ".join([__version__, hex(sys.hexversion), *_framework_stamps(), *_stamps(_PACKAGE)])


def help_file(key: str, width: int) -> str:
    return os.path.join(cache_root(), "help", f"help-{zlib.crc32(key.encode()):08x}-{width}.txt")


def _read_helps(path: str, key: str) -> dict[str, str] | None:
    try:
        with open(path, encoding="utf-8") as file:
            parts = file.read().split("\0")
    except (OSError, ValueError):
        return None
    if parts[0] != key or len(parts) % 2 != 1:
        return None  # another key with the same crc, or a torn file: render again
    return dict(zip(parts[1::2], parts[2::2], strict=False))  # a trailing odd part is dropped


def _writable(directory: str) -> bool:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK)


def render_helps(width: int) -> dict[str, str]:
    """The help text of every command path, rendered by typer at `width`."""
    from contextlib import redirect_stdout  # ~5 ms (collections, functools): only on a cache miss

    from gpuctl.cli.main import command, run  # lazy seam: typer and every command, only on a cache miss

    def paths(command: object, path: list[str]) -> list[list[str]]:
        found = [path]
        commands = getattr(command, "commands", None) or {}
        for name in list(commands):
            found += paths(commands[name], [*path, name])
        return found

    helps: dict[str, str] = {}
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width + 2)  # what click measures, whatever this terminal says
    try:
        for path in paths(command(), []):
            buffer = io.StringIO()
            try:
                with redirect_stdout(buffer):
                    code = run([*path, "--help"])
            except Exception:  # noqa: BLE001 - a command that cannot show help is left to typer
                continue
            if code == 0:
                helps[" ".join(path)] = buffer.getvalue()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return helps


def _store(path: str, key: str, helps: dict[str, str]) -> None:
    directory = os.path.dirname(path)
    try:
        # mode 0666 less the umask, as open() would make it: a cache, nothing private
        write_atomic(path, "\0".join([key, *(item for pair in helps.items() for item in pair)]), mode=0o666)
        # Keep the newest few (other widths, another install sharing the cache) and drop the rest,
        # with what a killed process left half-written.
        now = os.stat(path).st_mtime
        entries = sorted(os.scandir(directory), key=lambda e: e.stat().st_mtime, reverse=True)
        files = [e for e in entries if not e.name.endswith(".tmp")]
        stale = [e for e in entries if e.name.endswith(".tmp") and e.stat().st_mtime < now - 3600]
        for entry in files[_KEEP:] + stale:
            os.unlink(entry.path)
    except OSError:
        pass  # no cache this time: typer renders the help again next time


def serve_help(path: str) -> bool:
    """Print the help of command `path` from the cache (rendering every help first on a miss); False
    when typer must answer (not a command, or no writable cache)."""
    width = help_width()
    key = help_key()
    file = help_file(key, width)
    helps = _read_helps(file, key)
    if helps is None:
        if not _writable(os.path.dirname(file)):
            return False
        try:
            helps = render_helps(width)
        except Exception:  # noqa: BLE001 - typer itself will say what is wrong
            return False
        _store(file, key, helps)
    if path not in helps:
        return False
    sys.stdout.write(helps[path])
    return True


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        print(f"gpuctl {__version__}")
        sys.exit(0)
    path = help_path(args)
    if path is not None and serve_help(path):
        sys.exit(0)
    from gpuctl.cli.main import run  # lazy seam: typer and the command, after the help cache and --version

    code = run(args)
    gc.freeze()  # exit without a last collection over every object the imports made (~5 ms)
    sys.exit(code)
