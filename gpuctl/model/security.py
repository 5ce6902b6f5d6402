"""The security floor of the GPU stack: the lowest version of each component that NVIDIA's bulletins leave
without a known vulnerability, with the source of each line, and how a component's version is read from an image
tag or a ClusterPolicy's `version`. The one place `gpuctl doctor` takes them from (issue 31's bulletin list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVIDIA_SECURITY = "https://www.nvidia.com/en-us/security/"  # NVIDIA's product security bulletins, by product


@dataclass(frozen=True)
class Floor:
    """Versions of `component` below `fixed` carry `advisory` (a CVE, or NVIDIA's bulletin), per `source`."""

    component: str
    fixed: tuple[int, ...]
    advisory: str
    source: str

    @property
    def fixed_text(self) -> str:
        return ".".join(map(str, self.fixed))


# component -> its floors, highest first. Components are named by their image (nvcr.io/nvidia/...).
FLOORS: dict[str, tuple[Floor, ...]] = {
    "container-toolkit": (
        Floor("container-toolkit", (1, 19, 1), "CVE-2026-24260", "https://www.cve.org/CVERecord?id=CVE-2026-24260"),
        # "NVIDIAScape": NVIDIA's Container Toolkit bulletin of July 2025
        Floor("container-toolkit", (1, 17, 8), "CVE-2025-23266",
              "https://nvidia.custhelp.com/app/answers/detail/a_id/5659"),
    ),
    "gpu-operator": (Floor("gpu-operator", (26, 3, 2), "NVIDIA GPU Operator security bulletin", NVIDIA_SECURITY),),
    "k8s-device-plugin": (
        Floor("k8s-device-plugin", (0, 17, 3), "NVIDIA device plugin security bulletin", NVIDIA_SECURITY),),
    "k8s-mig-manager": (Floor("k8s-mig-manager", (0, 12, 2), "NVIDIA MIG manager security bulletin", NVIDIA_SECURITY),),
    # unauthenticated /debug/pprof
    "dcgm-exporter": (
        Floor("dcgm-exporter", (4, 8, 2), "CVE-2026-47483", "https://www.cve.org/CVERecord?id=CVE-2026-47483"),),
}

# The ClusterPolicy section that sets each operand's image (api/nvidia/v1 clusterpolicy_types.go; the
# v26.7.0 chart's values.yaml: toolkit, devicePlugin, migManager, dcgmExporter).
POLICY_SECTIONS = {"toolkit": "container-toolkit", "devicePlugin": "k8s-device-plugin",
                   "migManager": "k8s-mig-manager", "dcgmExporter": "dcgm-exporter"}

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
# dcgm-exporter tags name DCGM's version, then the exporter's: 4.6.0-4.8.3-distroless (chart v26.7.0)
_DCGM_EXPORTER = re.compile(r"v?\d+\.\d+\.\d+-(\d+)\.(\d+)\.(\d+)")


def parse_version(component: str, tag: str) -> tuple[int, ...] | None:
    """The version a tag (`v0.17.0`, `v1.17.8-ubuntu20.04`, `4.6.0-4.8.3-distroless`) names for `component`;
    None for a tag that names none (a digest, `latest`, the sim's placeholder `sim`)."""
    found = (_DCGM_EXPORTER if component == "dcgm-exporter" else _VERSION).match(tag)
    if found is None:
        return None
    return tuple(int(part or 0) for part in found.groups())


def component_of(image: str) -> tuple[str, str] | None:
    """(component, tag) of an image reference `registry/path/name:tag` whose name is in FLOORS; None otherwise
    (another image, or one pinned by digest only)."""
    name_part, _, digest = image.partition("@")
    path, colon, tag = name_part.rpartition(":")
    if not colon or "/" in tag:  # no tag (a registry port is not one)
        return None
    name = path.rsplit("/", 1)[-1]
    return (name, tag) if name in FLOORS else None


def broken_floors(component: str, version: tuple[int, ...]) -> list[Floor]:
    """The floors `version` of `component` is below, highest first."""
    return [f for f in FLOORS.get(component, ()) if version < f.fixed]


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
