"""What the commands that change a cluster print: a line per step on stderr as it ends (cluster create, apply,
mig apply, nodegroup add), and the node groups as they then are (those and nodegroup list). Not in a command's
module, so that `mig` and `apply` load no other command to print them, and `render` none of them."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gpuctl import api
from gpuctl.model.labels import GPU_RESOURCE
from gpuctl.model.mig import advertised_resources
from gpuctl.model.target import ClusterTarget
from gpuctl.util.output import emit, info

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuctl.api import PlatformResult, StepResult
    from gpuctl.model.spec import GroupPlan, PlatformSpec

# scaling: cloud (a node group of the cloud's), karpenter (a NodePool: min 0, max its limit, nodes = launched),
# or cloud+karpenter; nodes and ready_nodes count Karpenter's launched nodes too. gpus_per_node: physical GPUs;
# slices: what each GPU is shared into (time-slicing and MPS replicas, MIG instances; 1: whole), allocatable:
# what each node advertises, where the command knows the group's sharing (create, apply, nodegroup add).
# The table's READY (ready/nodes, as kubectl's) and BOUNDS (min..max) keep 80 columns; json has the fields.
GROUP_COLUMNS = ("name", "gpu", "gpus_per_node", "slices", "ready", "scaling", "bounds")
GROUP_WIDE = ("cluster", "sharing", "allocatable", "launched")


def _line(result: StepResult) -> str:
    return f"{result.name:<32} {result.outcome.value:<10} {result.seconds:6.1f}s"


def print_step(result: StepResult) -> None:
    info(_line(result))


def print_substep(result: StepResult) -> None:
    """A step of a command whose steps are part of one change (nodegroup add's): indented."""
    info(f"  {_line(result)}")


def group_rows(groups: Sequence[Any], plans: Sequence[GroupPlan] = (),
               mig_strategy: str = "mixed") -> list[dict[str, Any]]:
    """The node groups (gpuctl.api.list_node_groups's) as rows, with each one's sharing, slices per GPU and allocatable
    per node where `plans` (the command's spec) says it; unknown (None) otherwise."""
    known = {p.spec.name: p for p in plans}
    rows = []
    for group in groups:
        row: dict[str, Any] = {**asdict(group), "sharing": None, "mig_layout": None, "slices": None,
                               "allocatable": None}
        plan = known.get(group.name)
        if plan is not None and plan.mig is not None:
            row.update(sharing="mig", mig_layout=plan.mig.name, slices=max(1, len(plan.mig.profiles)),
                       allocatable=advertised_resources(plan.mig, group.gpus_per_node, mig_strategy))
        elif plan is not None:
            row.update(sharing=plan.sharing.strategy, slices=plan.sharing.replicas,
                       allocatable={GPU_RESOURCE: group.gpus_per_node * plan.sharing.replicas})
        rows.append(row)
    return rows


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """group_rows as a table shows them: READY `ready/nodes`, BOUNDS `min..max` (`-`: none)."""
    def bound(value: int | None) -> str:
        return "-" if value is None else str(value)

    return [{**row, "ready": f"{row['ready_nodes']}/{row['nodes']}",
             "bounds": f"{bound(row['min_nodes'])}..{bound(row['max_nodes'])}"} for row in rows]


def show_result(spec: PlatformSpec, result: PlatformResult, changed: bool, fmt: str, context: str | None) -> None:
    """What `cluster create` and `apply` print on stdout, once: the node groups as they now are (the steps went by
    on stderr as they ran), or in json and yaml the whole result, steps and checks included."""
    target = ClusterTarget(result.kubeconfig, context)  # the kubeconfig apply wrote
    groups = group_rows(api.list_node_groups(spec.cloud, spec.name, spec.options, target),
                        spec.every_group, spec.stack.mig_strategy)
    emit({"cluster": spec.name, "cloud": spec.cloud, "changed": changed, "kubeconfig": str(result.kubeconfig),
          "steps": [s.as_dict() for s in result.steps], "checks": [c.as_dict() for c in result.checks],
          "nodeGroups": groups}, fmt, GROUP_COLUMNS, GROUP_WIDE, rows=table_rows(groups))
