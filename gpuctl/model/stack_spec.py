"""How gpuctl sets up the GPU stack (NFD, GPU Operator, DRA driver) and the one MIG strategy it serves."""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.model.taints import Taint
from gpuctl.util.choices import Choice
from gpuctl.util.errors import UsageError

NFD_OWNERS = ("standalone", "operator")
MIG_STRATEGIES = ("mixed", "single")  # the GPU Operator's mig.strategy values gpuctl serves (not `none`)
# The one reading of each (--nfd and spec.gpuOperator.nfd, --mig-strategy, --strategy and
# spec.gpuOperator.migStrategy): any case, near misses answered.
NFD_OWNER = Choice("owner", NFD_OWNERS, {"gpu-operator": ("operator",), "nfd": ("standalone",)})
MIG_STRATEGY = Choice("strategy", MIG_STRATEGIES)


@dataclass(frozen=True)
class StackSpec:
    charts: str  # upstream | bundled | DIR | oci://...
    nfd: str = "standalone"  # who deploys NFD: its own release, or the operator; never both
    driver: bool = False  # False where the node image ships the driver (sim, NVIDIA AMIs)
    toolkit: bool = False
    mig_strategy: str = "mixed"
    taints: tuple[Taint, ...] = ()
    shares_gpus: bool = False  # some node group shares its GPUs: point the plugin at gpuctl's configs
    dra: bool = False  # GPUs by claim: NVIDIA's DRA driver serves them, the operator's device plugin is off
    dra_alpha_sharing: bool = False  # the DRA driver's alpha time-slicing and MPS gates on
    # Without `dra`: the node groups (a group's `dra: true`) DRA serves; the device plugin serves the others.
    dra_groups: tuple[str, ...] = ()

    def by_dra(self, group: str) -> bool:
        """Whether DRA serves node group `group`: every group in DRA mode, else the groups marked."""
        return self.dra or group in self.dra_groups

    @property
    def dra_driver(self) -> bool:
        """The DRA driver is installed: DRA mode, or some node group served by DRA."""
        return self.dra or bool(self.dra_groups)


@dataclass(frozen=True)
class GroupSharing:
    """What one node group asks of the device plugin, for the cluster-wide MIG strategy."""

    name: str
    strategy: str  # none | time-slicing | mps
    mig_profiles: tuple[str, ...] = ()  # the group's MIG layout, one entry per instance; () without MIG


def choose_mig_strategy(requested: str | None, groups: list[GroupSharing], field: str) -> str:
    """The operator's one mig.strategy for every node group, or a UsageError naming `field` and the groups.

    The device plugin refuses MPS under `mixed` (k8s-device-plugin cmd/nvidia-device-plugin/main.go,
    validateFlags), and `single` needs one MIG profile per GPU; default: `mixed` unless MPS is in use.
    """
    mps = [g.name for g in groups if g.strategy == "mps"]
    mixed_only = [g.name for g in groups if len(set(g.mig_profiles)) > 1]
    if requested is not None:
        requested = MIG_STRATEGY.check(requested, field)
    if mps and mixed_only:
        raise UsageError(field, f"node group {mps[0]!r} uses MPS, which the device plugin refuses under the "
                         f"mixed MIG strategy that node group {mixed_only[0]!r} needs for its several MIG profiles",
                         f"give {mixed_only[0]!r} a layout of one profile, or use time-slicing on {mps[0]!r}")
    if requested == "mixed" and mps:
        raise UsageError(field, f"node group {mps[0]!r} uses MPS, which the device plugin refuses under the "
                         "mixed MIG strategy", "use the single MIG strategy, or time-slicing")
    if requested == "single" and mixed_only:
        raise UsageError(field, f"node group {mixed_only[0]!r} has several MIG profiles per GPU, which the "
                         "single MIG strategy cannot advertise", "use the mixed MIG strategy")
    return requested or ("single" if mps else "mixed")
