"""Console entry point. `gpuctl --version` and the root `gpuctl --help` answer before typer loads.

Importing typer alone costs ~75 ms, more than a Go CLI's whole start-up. The root help is
rendered by typer once, then served from the cache, keyed by the gpuctl version, the help
width and the CLI modules' stamps (so an edited editable install re-renders it).
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

from gpuctl import __version__

_ROOT_HELP = (["--help"], ["-h"])


def _help_width() -> int:
    # click wraps help at min(terminal columns, 80); shutil would cost more than the lookup saves.
    try:
        columns = int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 80
    return min(columns, 80)


def _help_cache_path() -> Path:
    from gpuctl.paths import cache_dir

    key = hashlib.sha256(f"{__version__} {_help_width()}".encode())
    for module in sorted(Path(__file__).parent.glob("*.py")):
        stat = module.stat()
        key.update(f"{module.name} {stat.st_mtime_ns} {stat.st_size}".encode())
    return cache_dir() / "help" / f"root-{key.hexdigest()[:16]}.txt"


def _root_help() -> int:
    path = _help_cache_path()
    try:
        sys.stdout.write(path.read_text())
        return 0
    except OSError:
        pass
    from gpuctl.cli.main import run

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        code = run(["--help"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(buffer.getvalue())
    except OSError:
        pass  # a read-only cache only costs speed
    sys.stdout.write(buffer.getvalue())
    return code


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        print(f"gpuctl {__version__}")
        sys.exit(0)
    if args in _ROOT_HELP:
        sys.exit(_root_help())
    from gpuctl.cli.main import run

    sys.exit(run(args))
