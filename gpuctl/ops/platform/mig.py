"""The apply-mig/<group> step: the group's nodes pointed at its layout's mig-parted config, done once the MIG
manager has applied it (the waiting is `gpuctl mig apply`'s, ops.mig_apply)."""

from __future__ import annotations

from gpuctl.kube.kube import Kube
from gpuctl.kube.nodes import list_nodes_json
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import MigLayout, config_name
from gpuctl.ops.mig_apply import label_mig_config, wait_for_mig_state


def mig_step(kube: Kube, selector: str, group: str, layout: MigLayout) -> Step:
    return Step(f"apply-mig/{group}", lambda: observe_mig(kube, selector, layout),
                lambda: apply_mig_layout(kube, selector, layout))


def observe_mig(kube: Kube, selector: str, layout: MigLayout) -> Observed:
    name = config_name(layout)
    moving = [n["metadata"]["name"] for n in list_nodes_json(kube, selector)
              if (n["metadata"].get("labels") or {}).get(L.MIG_CONFIG) != name]
    return Observed(Change.UPDATED, f"{name} on {', '.join(moving)}") if moving else Observed(Change.NO_CHANGE)


def apply_mig_layout(kube: Kube, selector: str, layout: MigLayout) -> Change:
    """Point the nodes at the layout's mig-parted config and wait until the MIG manager applied it."""
    nodes = list_nodes_json(kube, selector)
    name = config_name(layout)
    change = label_mig_config(kube, nodes, name)
    wait_for_mig_state(kube, [n["metadata"]["name"] for n in nodes], name, None)  # until progress stalls, or --timeout
    return change
