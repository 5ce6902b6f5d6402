"""gpuctl's pinned tools, for the tests: their paths, the sim's Kubernetes version, the Kueue build."""

from __future__ import annotations

from gpuctl.tools.gobuild import patch_kueue_main
from gpuctl.tools.installer import ensure_installed, ensure_tools, find_tool
from gpuctl.tools.pins import HELM_VERSION, KUBERNETES_VERSION, SIM_TOOLS, helm_tool

__all__ = ["HELM_VERSION", "KUBERNETES_VERSION", "SIM_TOOLS", "ensure_installed", "ensure_tools", "find_tool",
           "helm_tool", "patch_kueue_main"]
