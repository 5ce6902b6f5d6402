"""The apply-mig/<group> step: the group's nodes pointed at its layout's mig-parted config, done once the MIG
manager has applied it. `gpuctl mig apply` (ops.mig_apply) labels and waits with the same two functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.kube.nodes import list_nodes_json, patch_nodes
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import MigLayout, config_name
from gpuctl.ops.platform.run import Run
from gpuctl.util.errors import ClusterError
from gpuctl.util.waiting import Count, Look, wait_until
from gpuctl.util.words import plural

PROGRESS_EVERY_S = 5.0


def mig_step(kube: Kube, selector: str, group: str, layout: MigLayout, run: Run) -> Step:
    return Step(f"apply-mig/{group}", lambda: observe_mig(kube, selector, group, layout, run),
                lambda: apply_mig_layout(kube, selector, layout))


def observe_mig(kube: Kube, selector: str, group: str, layout: MigLayout, run: Run) -> Observed:
    """The nodes to point at the layout: those that are not, and those ensure-nodegroup brings (run.joining)."""
    name = config_name(layout)
    found = list_nodes_json(kube, selector)
    moving = [n["metadata"]["name"] for n in found if (n["metadata"].get("labels") or {}).get(L.MIG_CONFIG) != name]
    if new := run.joining.get(group, 0):
        moving.append(f"{plural(new, 'new node')} once they join")
    return Observed(Change.UPDATED, f"{name} on {', '.join(moving)}") if moving else Observed(Change.NO_CHANGE)


def apply_mig_layout(kube: Kube, selector: str, layout: MigLayout) -> Change:
    """Point the nodes at the layout's mig-parted config and wait until the MIG manager applied it."""
    nodes = list_nodes_json(kube, selector)
    name = config_name(layout)
    change = label_mig_config(kube, nodes, name)
    wait_for_mig_state(kube, [n["metadata"]["name"] for n in nodes], name, None)  # until progress stalls, or --timeout
    return change


def label_mig_config(kube: Kube, nodes: Sequence[Mapping[str, Any]], name: str) -> Change:
    """Point the nodes (as JSON) at the config. Where it changes, clear the old state in the same
    patch, so the 'success' awaited next is the MIG manager's answer to this config, not the last one."""
    moving = [n for n in nodes if (n["metadata"].get("labels") or {}).get(L.MIG_CONFIG) != name]
    patched = patch_nodes(kube, moving, {L.MIG_CONFIG: name, L.MIG_STATE: None}).patched
    return Change.UPDATED if patched else Change.NO_CHANGE


def wait_for_mig_state(kube: Kube, names: list[str], config: str, timeout: float | None) -> Change:
    """Block until the MIG manager reports success on every node; fail fast on 'failed'. The wait lasts
    while nodes keep reaching success (gpuctl.util.waiting): WaitTimeout when none does for STALL_S seconds,
    or after `timeout` (None: the command's --timeout, if any)."""
    wanted = set(names)

    def look() -> Look:
        # One LIST, not a GET per node: a thousand nodes are read in one request.
        nodes = {n["metadata"]["name"]: n for n in list_nodes_json(kube, "") if n["metadata"]["name"] in wanted}
        states = {n: (nodes[n]["metadata"].get("labels") or {}).get(L.MIG_STATE, "unknown") if n in nodes
                  else "missing" for n in names}
        failed = sorted(n for n, s in states.items() if s == "failed")
        if failed:
            raise ClusterError(f"the MIG manager failed to apply {config} on {', '.join(failed)}",
                               "see the nvidia-mig-manager pod logs on those nodes")
        pending = sorted(n for n, s in states.items() if s != "success")
        listed = ", ".join(f"{n} ({states[n]})" for n in pending[:5]) + (f" (+{len(pending) - 5} more)"
                                                                           if len(pending) > 5 else "")
        return Look(not pending, (Count(f"nodes at {L.MIG_STATE}=success", len(names) - len(pending), len(names)),),
                    f"MIG config {config} pending on {listed}" if pending else "")

    wait_until(f"{L.MIG_STATE}=success", look, "a node stuck in 'pending' may need its GPU workloads drained",
               timeout=timeout, every=PROGRESS_EVERY_S)
    return Change.PASSED
