"""The sim's Karpenter capacity as apply writes it with --karpenter: the KWOKNodeClass, then a NodePool (and
NodeOverlay) per node group, from the one renderer of gpuctl/stack/karpenter.py. `gpuctl render` prints the same."""

from __future__ import annotations

from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.spec import PlatformSpec
from gpuctl.simulator import karpenter as sim_karpenter
from gpuctl.simulator.nodes import DEVICES_PENDING
from gpuctl.stack.karpenter import pool_objects


def karpenter_objects(spec: PlatformSpec) -> list[dict[str, Any]]:
    """The node class, then each node group's NodePool and NodeOverlay: a node joins with the sim's devices-
    pending taint until its GPUs are advertised (Karpenter's startup taint)."""
    return [sim_karpenter.render_kwok_node_class(),
            *pool_objects(spec, L.NODEGROUP, sim_karpenter.KWOK_NODE_CLASS, sim_karpenter.CONSOLIDATE_AFTER,
                          (DEVICES_PENDING,))]
