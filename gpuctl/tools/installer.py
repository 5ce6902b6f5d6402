"""Install the pinned tools into a per-user cache keyed by version.

Order for each tool: already cached -> on PATH at the pinned version (linked into the cache)
-> official release download -> build from the Go module proxy. Safe to run concurrently
(a file lock serialises installers) and idempotent.
"""

from __future__ import annotations

import fcntl
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuctl.tools import gobuild
from gpuctl.tools.download import download
from gpuctl.tools.pins import TOOLS, Tool
from gpuctl.util.errors import ToolError
from gpuctl.util.paths import cache_dir

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class InstalledTool:
    name: str
    version: str
    path: Path
    source: str  # cached | PATH | download | go build


def tools_dir() -> Path:
    return cache_dir() / "tools"


def cached_path(tool: Tool) -> Path:
    return tools_dir() / tool.name / tool.version / tool.name


def is_cached(tool: Tool) -> bool:
    """Whether the cache holds the tool: its binary and every extra its recipe leaves beside it (a cache
    filled by an older gpuctl may lack an extra added since: the tool is built again)."""
    path = cached_path(tool)
    return path.exists() and all((path.parent / extra).exists() for extra in tool.extras)


def reports_version(binary: Path | str, tool: Tool) -> bool:
    """True if `binary` runs and prints the pinned version (etcd prints it without the 'v')."""
    try:
        proc = subprocess.run([str(binary), *tool.version_args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    pattern = rf"(?<![\w.])v?{re.escape(tool.version.lstrip('v'))}(?![\w.])"
    return proc.returncode == 0 and re.search(pattern, proc.stdout + proc.stderr) is not None


@contextmanager
def _install_lock() -> Iterator[None]:
    tools_dir().mkdir(parents=True, exist_ok=True)
    with (tools_dir() / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _link_from_path(tool: Tool) -> Path | None:
    if tool.extras:  # PATH holds a binary, never the files the recipe makes beside it
        return None
    found = shutil.which(tool.name)
    if found is None or not reports_version(found, tool):
        return None
    dest = cached_path(tool)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    dest.symlink_to(Path(found).resolve())
    return dest


def _download(tool: Tool) -> str | None:
    if tool.url is None:
        return "no release download; gpuctl builds it from its own Go source"
    dest = cached_path(tool)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    reason = download(tool, partial)
    if reason is None:
        partial.replace(dest)
    else:
        partial.unlink(missing_ok=True)
    return reason


def _build(tools: list[Tool], go: str, progress: Progress) -> None:
    recipe = tools[0].recipe
    names = ", ".join(t.name for t in tools)
    workdir = cache_dir() / "build" / f"{recipe}-{tools[0].version}"
    out = workdir / "out"
    log = workdir / "build.log"
    workdir.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    progress(f"building {names} {tools[0].version} from the Go module proxy "
             f"(first run only, can take 30 min on 2 cores; log: {log})")
    started = time.monotonic()
    gobuild.build(go, recipe, tools, workdir, out, log)
    for tool in tools:
        built = out / tool.name
        if not reports_version(built, tool):
            raise ToolError(f"the {tool.name} built from source does not report {tool.version}",
                            f"see {log}")
        dest = cached_path(tool)
        dest.parent.mkdir(parents=True, exist_ok=True)
        for extra in tool.extras:  # before the binary: a cached binary means its extras are there
            if not (out / extra).exists():
                raise ToolError(f"the {tool.name} build left no {extra}", f"see {log}")
            if (dest.parent / extra).is_dir():
                shutil.rmtree(dest.parent / extra)
            shutil.move(str(out / extra), dest.parent / extra)
        shutil.move(str(built), dest)
    shutil.rmtree(out, ignore_errors=True)
    progress(f"built {names} in {time.monotonic() - started:.0f}s")


def find_tool(name: str) -> Path | None:
    """The cached binary for `name` at its pinned version, or None (never installs)."""
    tool = TOOLS[name]
    return cached_path(tool) if is_cached(tool) else None


def ensure_tools(names: Iterable[str], progress: Progress = lambda _: None) -> list[InstalledTool]:
    """Make every named tool available at its pinned version; raise ToolError saying what is missing."""
    return ensure_installed([TOOLS[n] for n in names], progress)


def ensure_installed(wanted: list[Tool], progress: Progress = lambda _: None) -> list[InstalledTool]:
    """ensure_tools for explicit Tools, each cached by its own version (e.g. pins.helm_tool of a release other
    than the pin, for a test that needs both)."""
    result: dict[str, InstalledTool] = {}
    with _install_lock():
        missing: list[Tool] = []
        for tool in wanted:
            log.debug("%s %s: looking in %s", tool.name, tool.version, cached_path(tool))
            if is_cached(tool):
                result[tool.name] = InstalledTool(tool.name, tool.version, cached_path(tool), "cached")
            elif (linked := _link_from_path(tool)) is not None:
                result[tool.name] = InstalledTool(tool.name, tool.version, linked, "PATH")
                progress(f"{tool.name} {tool.version}: using {linked.resolve()} from PATH")
            else:
                missing.append(tool)

        failures: dict[str, str] = {}
        for tool in missing:
            reason = _download(tool)
            if reason is None:
                result[tool.name] = InstalledTool(tool.name, tool.version, cached_path(tool), "download")
                progress(f"{tool.name} {tool.version}: downloaded")
            else:
                log.info("%s %s: %s", tool.name, tool.version, reason)
                failures[tool.name] = reason

        to_build = [t for t in missing if t.name in failures]
        if to_build:
            go, go_reason = gobuild.go_toolchain()
            if go is None:
                detail = "; ".join(f"{t.name} {t.version} ({failures[t.name]})" for t in to_build)
                raise ToolError(
                    f"cannot install {detail}, and cannot build them: {go_reason}",
                    f"install Go {gobuild.MIN_GO[0]}.{gobuild.MIN_GO[1]}+ and rerun 'gpuctl sim install', "
                    f"or put these versions on PATH",
                )
            for recipe in dict.fromkeys(t.recipe for t in to_build):
                group = [t for t in to_build if t.recipe == recipe]
                _build(group, go, progress)
                for tool in group:
                    result[tool.name] = InstalledTool(tool.name, tool.version, cached_path(tool), "go build")
    return [result[t.name] for t in wanted]

