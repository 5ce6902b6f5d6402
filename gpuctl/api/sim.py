"""What the sim provider needs on this machine: its pinned tools (gpuctl.tools.pins.SIM_TOOLS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.tools.installer import ensure_tools, tools_dir
from gpuctl.tools.pins import SIM_TOOLS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from gpuctl.tools.installer import InstalledTool


def install_sim_tools(progress: Callable[[str], None] | None = None) -> tuple[list[InstalledTool], Path]:
    """The pinned tools behind the sim provider, installed into the user cache (and where that is)."""
    return ensure_tools(SIM_TOOLS, progress=progress or (lambda _: None)), tools_dir()
