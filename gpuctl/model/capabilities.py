"""What a cloud's provider offers. Each provider declares its own (gpuctl/providers/<cloud>/__init__.py); the
spec passes and the operations ask these, never the cloud's name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    default_charts: str  # where NFD and GPU Operator charts come from: upstream | bundled
    ships_driver: bool  # the node image has the NVIDIA driver and toolkit: the operator must not install them
    runs_kueue: bool = False  # runs Kueue's CRDs and controller itself (no chart): Provider.ensure_kueue
    karpenter: bool = False  # writes Karpenter NodePools for its node groups (--karpenter)
    flavor: bool = False  # a node group may name the cloud's flavor (OpenStack)
    instance_type: bool = False  # a node group may name the cloud's instance type (EC2)
    monitoring: bool = False  # runs Prometheus and a DCGM exporter itself: Provider.prometheus_url

    def kueue_chart(self, kueue: bool) -> bool:
        """Whether a spec asking for Kueue (`kueue`) gets Kueue's Helm chart: the one rule the spec's check, `render`
        and apply's install-kueue step follow (a provider that runs Kueue itself, the sim, needs none)."""
        return kueue and not self.runs_kueue


CapabilitiesOf = Callable[[str], Capabilities]  # a known cloud's name -> what its provider declares
