"""gpuctl's pinned tools, for the tests: their paths, the sim's Kubernetes version, the Kueue build."""

from __future__ import annotations

from gpuctl.tools.gobuild import patch_kueue_main
from gpuctl.tools.installer import ensure_tools, find_tool
from gpuctl.tools.pins import KUBERNETES_VERSION, SIM_TOOLS

__all__ = ["KUBERNETES_VERSION", "SIM_TOOLS", "ensure_tools", "find_tool", "patch_kueue_main"]
