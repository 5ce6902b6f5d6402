"""A MIG layout applied to a running cluster's GPU nodes (gpuctl.ops.mig_apply)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.api.reach import client
from gpuctl.model.target import DEFAULT_TARGET
from gpuctl.ops.mig_apply import apply_mig as apply
from gpuctl.ops.mig_apply import check_mig_inputs
from gpuctl.stack.helm import HelmTarget

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget
    from gpuctl.ops.platform.results import Reporter, StepResult


def apply_mig(layout: str, nodegroup: str | None = None, selector: str | None = None, strategy: str | None = None,
              timeout: float = 300.0, report: Reporter | None = None,
              target: ClusterTarget | None = None) -> tuple[list[StepResult], dict[str, dict[str, int]]]:
    """Apply a MIG layout to the selected GPU nodes (every input judged before the kubeconfig is read), or,
    with neither `nodegroup` nor `selector`, to the one node group whose GPUs take it; the steps run and each
    node's expected allocatable."""
    target = target or DEFAULT_TARGET
    check_mig_inputs(layout, nodegroup, selector, strategy, timeout)
    return apply(client(target), HelmTarget(target.kubeconfig, target.context), layout, nodegroup, selector,
                 strategy, timeout, report or (lambda _: None))
