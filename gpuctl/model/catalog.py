"""The GPU catalog: the one place that knows GPU models.

Figures come from ../shared/reference/gpu-facts.md (NVIDIA MIG user guide, GPU Feature
Discovery labels, AWS instance types). `memory_mib` is what GFD reports in
`nvidia.com/gpu.memory`. OpenStack flavors are defaults a site overrides in its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.util.choices import Choice


@dataclass(frozen=True)
class MigProfile:
    """One MIG instance profile on one GPU model, with its placement geometry."""

    name: str  # e.g. "3g.20gb"; profile names, never IDs (IDs differ between models)
    compute: int  # compute slices used
    width: int  # memory slots occupied
    starts: tuple[int, ...]  # memory slots the instance may begin at
    max_count: int  # most instances of this profile on one GPU


@dataclass(frozen=True)
class MigGeometry:
    compute_slices: int
    memory_slots: int
    profiles: tuple[MigProfile, ...]
    balanced: tuple[str, ...]  # mig-parted's `all-balanced`, one entry per instance

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class InstanceType:
    """An EC2 GPU instance type as Karpenter knows it: vCPUs, memory and pod limit are Karpenter's
    `karpenter.k8s.aws/instance-cpu`, `-instance-memory` (MiB) and `pods` (aws/karpenter-provider-aws
    v1.14.1, ../shared/upstream/karpenter-provider-aws-v1.14.1/instance-types-gpu.json; a unit test holds
    the catalog to it). `price`: on-demand USD per hour in us-east-1, from the same project's
    pkg/providers/pricing/zz_generated.pricing_aws.go (generated 2026-02-09); None where it lists none."""

    name: str
    gpus: int
    cpu: int
    memory_mib: int
    pods: int
    price: float | None


@dataclass(frozen=True)
class GpuModel:
    name: str  # catalog key used on the command line: t4, a100-40gb...
    product: str  # GFD label nvidia.com/gpu.product
    memory_mib: int
    family: str  # GFD label nvidia.com/gpu.family
    compute_capability: tuple[int, int]
    karpenter_name: str  # karpenter.k8s.aws/instance-gpu-name
    instance_types: tuple[InstanceType, ...]  # EC2, smallest first
    openstack_flavor: str
    default_gpus_per_node: int
    mig: MigGeometry | None = field(default=None)
    # karpenter.k8s.aws/instance-gpu-memory (MiB per GPU, as EC2 reports it, not GFD): instance-gpu-name
    # alone does not tell A100 40 GB from 80 GB (p4d vs p4de).
    karpenter_memory_mib: int | None = None

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def default_instance_type(self) -> InstanceType | None:
        return self.instance_types[0] if self.instance_types else None


def _eight_slot_mig(one: int, one_double: int, two: int, three: int, four: int, seven: int) -> MigGeometry:
    """A100/H100/H200/B200 geometry: 7 compute slices over 8 memory slots; sizes in GB."""
    profiles = (
        MigProfile(f"1g.{one}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        MigProfile(f"1g.{one}gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        MigProfile(f"1g.{one_double}gb", 1, 2, (0, 2, 4, 6), 4),
        MigProfile(f"2g.{two}gb", 2, 2, (0, 2, 4), 3),
        MigProfile(f"3g.{three}gb", 3, 4, (0, 4), 2),
        MigProfile(f"4g.{four}gb", 4, 4, (0,), 1),
        MigProfile(f"7g.{seven}gb", 7, 8, (0,), 1),
    )
    balanced = (f"1g.{one}gb", f"1g.{one}gb", f"2g.{two}gb", f"3g.{three}gb")
    return MigGeometry(compute_slices=7, memory_slots=8, profiles=profiles, balanced=balanced)


_A30_MIG = MigGeometry(
    compute_slices=4,
    memory_slots=4,
    profiles=(
        MigProfile("1g.6gb", 1, 1, (0, 1, 2, 3), 4),
        MigProfile("1g.6gb+me", 1, 1, (0, 1, 2, 3), 1),
        MigProfile("2g.12gb", 2, 2, (0, 2), 2),
        MigProfile("2g.12gb+me", 2, 2, (0, 2), 1),
        MigProfile("4g.24gb", 4, 4, (0,), 1),
    ),
    balanced=("1g.6gb", "1g.6gb", "2g.12gb"),
)


def _types(*rows: tuple[str, int, int, int, int, float | None]) -> tuple[InstanceType, ...]:
    """(name, GPUs, vCPUs, memory MiB, pods, price) rows."""
    return tuple(InstanceType(*row) for row in rows)


_MODELS: tuple[GpuModel, ...] = (
    GpuModel("t4", "Tesla-T4", 15360, "turing", (7, 5), "t4",
             _types(("g4dn.xlarge", 1, 4, 16384, 29, 0.526), ("g4dn.2xlarge", 1, 8, 32768, 29, 0.752),
                    ("g4dn.4xlarge", 1, 16, 65536, 29, 1.204), ("g4dn.8xlarge", 1, 32, 131072, 58, 2.176),
                    ("g4dn.16xlarge", 1, 64, 262144, 58, 4.352), ("g4dn.12xlarge", 4, 48, 196608, 234, 3.912)),
             "g2.5xlarge", 1,
             karpenter_memory_mib=16384),
    GpuModel("a10g", "NVIDIA-A10G", 23028, "ampere", (8, 6), "a10g",
             _types(("g5.xlarge", 1, 4, 16384, 58, 1.006), ("g5.2xlarge", 1, 8, 32768, 58, 1.212),
                    ("g5.12xlarge", 4, 48, 196608, 737, 5.672), ("g5.48xlarge", 8, 192, 786432, 345, 16.288)),
             "g3.a10g.xlarge", 1,
             karpenter_memory_mib=22888),
    GpuModel("l4", "NVIDIA-L4", 23034, "ada-lovelace", (8, 9), "l4",
             _types(("g6.xlarge", 1, 4, 16384, 58, 0.8048), ("g6.2xlarge", 1, 8, 32768, 58, 0.9776),
                    ("g6.12xlarge", 4, 48, 196608, 234, 4.6016), ("g6.48xlarge", 8, 192, 786432, 737, 13.3504)),
             "g3.l4.xlarge", 1,
             karpenter_memory_mib=22888),
    GpuModel("l40s", "NVIDIA-L40S", 46068, "ada-lovelace", (8, 9), "l40s",
             _types(("g6e.xlarge", 1, 4, 32768, 58, 1.861), ("g6e.2xlarge", 1, 8, 65536, 58, 2.24208),
                    ("g6e.12xlarge", 4, 48, 393216, 292, 10.49264),
                    ("g6e.48xlarge", 8, 192, 1572864, 492, 30.13118)),
             "g3.l40s.xlarge", 1,
             karpenter_memory_mib=45776),
    GpuModel("a30", "NVIDIA-A30", 24576, "ampere", (8, 0), "a30", (), "g3.a30.xlarge", 1,
             _A30_MIG),
    GpuModel("a100-40gb", "NVIDIA-A100-SXM4-40GB", 40960, "ampere", (8, 0), "a100",
             _types(("p4d.24xlarge", 8, 96, 1179648, 737, 21.957642)), "g4.a100-40gb.8xlarge", 8,
             _eight_slot_mig(5, 10, 10, 20, 20, 40),
             karpenter_memory_mib=40960),
    GpuModel("a100-80gb", "NVIDIA-A100-SXM4-80GB", 81920, "ampere", (8, 0), "a100",
             _types(("p4de.24xlarge", 8, 96, 1179648, 737, 27.44705)), "g4.a100-80gb.8xlarge", 8,
             _eight_slot_mig(10, 20, 20, 40, 40, 80),
             karpenter_memory_mib=81920),
    GpuModel("h100-80gb", "NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0), "h100",
             _types(("p5.48xlarge", 8, 192, 2097152, 100, 55.04)), "g5.h100.8xlarge", 8,
             _eight_slot_mig(10, 20, 20, 40, 40, 80),
             karpenter_memory_mib=81920),
    GpuModel("h200", "NVIDIA-H200", 143771, "hopper", (9, 0), "h200",
             _types(("p5e.48xlarge", 8, 192, 2097152, 100, None),
                    ("p5en.48xlarge", 8, 192, 2097152, 198, 63.296)), "g5.h200.8xlarge", 8,
             _eight_slot_mig(18, 35, 35, 71, 71, 141),
             karpenter_memory_mib=144384),
    GpuModel("b200", "NVIDIA-B200", 183359, "blackwell", (10, 0), "b200",
             _types(("p6-b200.48xlarge", 8, 192, 2097152, 198, 113.9328)), "g6.b200.8xlarge", 8,
             _eight_slot_mig(23, 45, 45, 90, 90, 180),
             karpenter_memory_mib=183359),
)

GPUS: dict[str, GpuModel] = {m.name: m for m in _MODELS}
# Every MIG profile of the catalog's GPUs: a tenant's quota refuses (0) each one it is not given.
MIG_PROFILES: tuple[str, ...] = tuple(sorted({p.name for m in _MODELS if m.mig is not None for p in m.mig.profiles}))




def _gpu_aliases() -> dict[str, tuple[str, ...]]:
    """Other names of the catalog's GPUs, each with the models it may mean: Karpenter's instance-gpu-name
    (`a100` is both A100s), GFD's product (`Tesla-T4`) and NVML's name with '-' for blanks."""
    aliases: dict[str, tuple[str, ...]] = {}
    for model in _MODELS:
        for other in {model.karpenter_name, model.product, NVML_NAMES.get(model.name, "").replace(" ", "-")}:
            if other and other.lower() != model.name:
                aliases[other.lower()] = (*aliases.get(other.lower(), ()), model.name)
    return aliases


def get_gpu(name: str, field: str = "--gpu") -> GpuModel:
    """Look a GPU up by catalog name in any case (GPU.check: a flag and a spec read the same); a UsageError
    naming `field` otherwise, with the name meant where it is a near miss or another name of a catalog GPU."""
    return GPUS[GPU.check(name, field)]


# NVML's device name (nvmlDeviceGetName), the `productName` attribute; GFD's nvidia.com/gpu.product is it
# with blanks as '-' (the catalog's `product`), which cannot be turned back: "NVIDIA A100-SXM4-40GB".
NVML_NAMES = {
    "t4": "Tesla T4", "a10g": "NVIDIA A10G", "l4": "NVIDIA L4", "l40s": "NVIDIA L40S", "a30": "NVIDIA A30",
    "a100-40gb": "NVIDIA A100-SXM4-40GB", "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "h100-80gb": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200", "b200": "NVIDIA B200",
}


def nvml_name(model: GpuModel) -> str:
    """The GPU's NVML device name, as DRA's `productName` attribute carries it."""
    return NVML_NAMES.get(model.name, model.product)


GPU = Choice("GPU", tuple(GPUS), _gpu_aliases(), "gpuctl gpus lists them")
