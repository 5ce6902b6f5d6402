"""Spec documents in: a GpuCluster read (a file, or a command line's document), defaulted and validated, and the
PlatformSpec it makes; a cloud's name judged. Only the model and the providers' capabilities load with this
module: `cluster create --export-spec` stays fast (bench/startup)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.model import specfile
from gpuctl.providers import capabilities_of
from gpuctl.providers import check_cloud as check

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from gpuctl.model.spec import PlatformSpec
    from gpuctl.model.specfile import GpuClusterDoc, ValidGroup


def load_spec(path: Path) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """Read, default and validate a GpuCluster file against the catalog and what its cloud's provider offers;
    every error names its field (exit 2)."""
    return specfile.load_spec(path, capabilities_of)


def load_document(raw: Any, flags: Mapping[str, str] | None = None) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """load_spec of a document already read (a command line's: `flags` maps field paths to the flags)."""
    return specfile.load_document(raw, capabilities_of, flags)


def to_platform(doc: GpuClusterDoc, groups: list[ValidGroup]) -> PlatformSpec:
    """The PlatformSpec of a loaded spec (load_spec), as its cloud's provider builds it."""
    return specfile.to_platform(doc, groups, capabilities_of(doc.cloud).ships_driver)


def check_cloud(cloud: str, field: str = "--cloud") -> str:
    """`cloud` in its one spelling (any case) where a provider exists for it, else a UsageError naming `field`
    (with the cloud meant, for a near miss or `aws`)."""
    return check(cloud, field)
