"""The GPU nodes as they are: one row per node (gpuctl.ops.status)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.api.reach import client
from gpuctl.model.naming import check_name
from gpuctl.ops.status import gpu_status as status
from gpuctl.ops.status import status_columns as columns
from gpuctl.ops.status import status_summary as summary

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget


def gpu_status(nodegroup: str | None = None, target: ClusterTarget | None = None) -> list[dict[str, Any]]:
    """One row per GPU node (of `nodegroup`): what it offers, its sharing, MIG state and device plugin."""
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    return status(client(target), nodegroup)


def status_columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The columns of a status table: DRA's device counts where the DRA driver serves every node, sharing and
    allocatable where the device plugin does, both where each serves some (each row its own node's)."""
    return columns(rows)


def status_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The nodes each agent serves, counted: the device plugin's and their allocatable GPUs, the DRA driver's and
    their devices, allocated and free."""
    return summary(rows)
