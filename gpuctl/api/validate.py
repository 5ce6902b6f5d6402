"""The platform's checks on a running cluster (gpuctl.ops.validate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.api.reach import client
from gpuctl.model.naming import check_duration, check_name, check_text
from gpuctl.model.spec import SMOKE_IMAGE
from gpuctl.ops.validate import validate_cluster as validate

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget
    from gpuctl.ops.smoke import Check


def validate_cluster(nodegroup: str | None = None, image: str = SMOKE_IMAGE, timeout: float = 120.0,
                     target: ClusterTarget | None = None) -> list[Check]:
    """The platform's checks (capacity, node config, one device plugin, doctor's errors, the CUDA smoke test)."""
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    check_text(image, "--image")
    check_duration(timeout, "--timeout")
    return validate(client(target), nodegroup, image, timeout)
