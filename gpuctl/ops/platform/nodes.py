"""The configure-nodes/<group> step: the group's taints, labels and device-plugin config label (its sharing) on
each of its nodes, one patch per node that differs."""

from __future__ import annotations

import yaml

from gpuctl.kube.kube import Kube
from gpuctl.kube.nodes import converge_nodes, list_nodes_json, node_patch
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.sharing import CONFIG_LABEL, Sharing
from gpuctl.model.spec import GroupPlan
from gpuctl.model.taints import Taint
from gpuctl.ops.platform.run import Run
from gpuctl.util.words import plural


def nodes_step(kube: Kube, selector: str, group: GroupPlan, run: Run) -> Step:
    return Step(f"configure-nodes/{group.spec.name}", lambda: observe_nodes(kube, selector, group, run),
                lambda: configure_nodes(kube, selector, group.sharing, group.spec.taints, group.labels))


def observe_nodes(kube: Kube, selector: str, group: GroupPlan, run: Run) -> Observed:
    """The patches of the group's nodes; nodes that ensure-nodegroup brings (run.joining) join without what this
    step sets (a node it configured carries at least its L.APPLIED record), so they count too."""
    found = list_nodes_json(kube, selector)
    labels = {CONFIG_LABEL: group.sharing.config_key, **group.labels}
    patches = {n["metadata"]["name"]: p for n in found if (p := node_patch(n, labels, group.spec.taints, record=True))}
    new = run.joining.get(group.spec.name, 0)
    if not patches and not new:
        return Observed(Change.NO_CHANGE)
    diff = "\n".join(f"{name}: {yaml.safe_dump(p, default_flow_style=True).strip()}"
                     for name, p in sorted(patches.items())[:5])
    what = ([f"{len(patches)} of {len(found)} nodes"] if patches else []) + \
        ([f"{plural(new, 'new node')} once they join"] if new else [])
    return Observed(Change.UPDATED, ", ".join(what), diff)


def configure_nodes(kube: Kube, selector: str, sharing: Sharing, taints: tuple[Taint, ...],
                    labels: dict[str, str] | None = None) -> Change:
    """Taints, the device-plugin config label and the group's labels: one patch per node that differs."""
    update = converge_nodes(kube, selector, {CONFIG_LABEL: sharing.config_key, **(labels or {})}, taints)
    return Change.UPDATED if update.patched else Change.NO_CHANGE
