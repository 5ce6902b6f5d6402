"""What each node group is meant to be, recorded on the cluster: its GPU, taints, sharing or MIG layout and
labels, one key per group of the ConfigMap `gpuctl-node-groups` beside gpuctl's other GPU configs.

A command about some node groups (`cluster create` of one group, an `apply -f` that names only some) still
sets cluster-wide state: the operator's tolerations, whether the device plugin reads gpuctl's configs, the
MIG strategy. That state is derived from every group the cluster has, the ones recorded here and the ones
the command names; `nodegroup scale` gives new nodes their group's configuration from here, and `validate`
compares each node with its group's record rather than with what the node happens to carry. Beside them,
the record of how gpuctl last set up the GPU stack (read_recorded_stack)."""

from __future__ import annotations

import json
from dataclasses import replace

from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import ensure_config_map_keys, read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS
from gpuctl.model.change import Change
from gpuctl.model.mig import config_name, parse_layout
from gpuctl.model.sharing import CONFIG_LABEL, Sharing
from gpuctl.model.spec import GroupPlan, NodeGroupSpec, PlatformSpec, all_taints
from gpuctl.model.stack_spec import GroupSharing, StackSpec, choose_mig_strategy
from gpuctl.model.taints import parse_taints
from gpuctl.stack.existing import config_namespace
from gpuctl.stack.values import STACK_CONFIGMAP, stack_from_record, stack_record
from gpuctl.util.errors import UsageError

GROUPS_CONFIGMAP = "gpuctl-node-groups"


def record_of(group: GroupPlan) -> str:
    """The record of one node group; `nodes`: the nodes of its own gpuctl last gave it (apply, nodegroup scale),
    which `doctor` holds its nodes against (0 for a group only Karpenter launches nodes for)."""
    spec = group.spec
    return json.dumps({"gpu": spec.gpu.name, "gpusPerNode": spec.gpus_per_node, "nodes": spec.nodes,
                       "taints": [str(t) for t in spec.taints], "sharing": group.sharing.strategy,
                       "replicas": group.sharing.replicas, "mig": group.mig.name if group.mig else None,
                       "labels": dict(sorted(group.labels.items()))}, sort_keys=True)


def plan_of(name: str, text: str) -> GroupPlan | None:
    """The GroupPlan a record describes (0 nodes); None for a record this gpuctl cannot read."""
    try:
        doc = json.loads(text)
        model = GPUS[doc["gpu"]]
        taints = parse_taints(doc["taints"], f"{GROUPS_CONFIGMAP}/{name}.taints")
        mig = parse_layout(doc["mig"], model) if doc.get("mig") else None
        sharing = Sharing(str(doc["sharing"]), int(doc["replicas"]))
        spec = NodeGroupSpec(name, model, 0, int(doc["gpusPerNode"]), taints=taints)
        return GroupPlan(spec, sharing, mig, {str(k): str(v) for k, v in (doc.get("labels") or {}).items()})
    except (ValueError, KeyError, TypeError, UsageError):
        return None


def read_group_plans(kube: Kube, namespace: str) -> dict[str, GroupPlan]:
    """Every node group recorded on the cluster, by name."""
    data = read_config_map_data(kube, namespace, GROUPS_CONFIGMAP) or {}
    return {name: plan for name, text in sorted(data.items()) if (plan := plan_of(name, text)) is not None}


def sizes_of(data: dict[str, str]) -> dict[str, int]:
    """The recorded node count of each node group whose record has one (records written before gpuctl recorded
    it have none)."""
    sizes = {}
    for name, text in sorted(data.items()):
        try:
            nodes = json.loads(text).get("nodes")
        except (ValueError, AttributeError):
            continue
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            sizes[name] = nodes
    return sizes


def read_group_sizes(kube: Kube, namespace: str) -> dict[str, int]:
    """Each recorded node group's node count (sizes_of), by name."""
    return sizes_of(read_config_map_data(kube, namespace, GROUPS_CONFIGMAP) or {})


def record_size(kube: Kube, name: str, nodes: int) -> Change:
    """After `nodegroup scale`: node group `name`'s record says `nodes` (NO_CHANGE where it has no record)."""
    namespace = config_namespace(kube)
    text = (read_config_map_data(kube, namespace, GROUPS_CONFIGMAP) or {}).get(name)
    try:
        doc = json.loads(text) if text is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return Change.NO_CHANGE
    doc["nodes"] = nodes
    change, _ = ensure_config_map_keys(kube, namespace, GROUPS_CONFIGMAP, {name: json.dumps(doc, sort_keys=True)})
    return change


def read_recorded_groups(kube: Kube) -> dict[str, GroupPlan]:
    """The node groups recorded on the cluster (in the namespace of the GPU configs gpuctl writes)."""
    return read_group_plans(kube, config_namespace(kube))


def read_recorded_stack(kube: Kube) -> StackSpec | None:
    """How gpuctl last set up the cluster's GPU stack (its record beside the GPU configs); None where it has not."""
    record = read_config_map_data(kube, config_namespace(kube), STACK_CONFIGMAP) or {}
    return stack_from_record(record["stack.json"]) if "stack.json" in record else None


def forget_dra_group(kube: Kube, name: str) -> Change:
    """Take node group `name` (deleted) off the recorded stack's DRA groups: a later group of that name comes up
    under what its own command says, not moved to DRA by a mark its predecessor left."""
    stack = read_recorded_stack(kube)
    if stack is None or name not in stack.dra_groups:
        return Change.NO_CHANGE
    kept = replace(stack, dra_groups=tuple(g for g in stack.dra_groups if g != name))
    return ensure_config_map_keys(kube, config_namespace(kube), STACK_CONFIGMAP, {"stack.json": stack_record(kept)})[0]


def with_cluster_groups(spec: PlatformSpec, recorded: dict[str, GroupPlan],
                        recorded_stack: StackSpec | None) -> PlatformSpec:
    """`spec` with the cluster's other recorded node groups: the operator tolerates their taints too, serves
    gpuctl's configs where any group shares, under one MIG strategy for all (refused when none fits); and DRA
    keeps serving those of them it serves (`recorded_stack`'s dra_groups), so its driver stays."""
    others = others_of({g.spec.name for g in spec.groups}, recorded)
    if not others:
        return spec
    every = spec.groups + others
    strategy = choose_mig_strategy(spec.stack.mig_strategy, [
        GroupSharing(g.spec.name, g.sharing.strategy, g.mig.profiles if g.mig else ()) for g in every],
        "spec.gpuOperator.migStrategy (--mig-strategy)")
    on_dra = recorded_stack.dra_groups if recorded_stack is not None and not spec.stack.dra else ()
    dra_groups = spec.stack.dra_groups + tuple(g.spec.name for g in others if g.spec.name in on_dra)
    stack = replace(spec.stack, taints=all_taints(every), mig_strategy=strategy,
                    shares_gpus=any(g.sharing.config_key for g in every), dra_groups=dra_groups)
    return replace(spec, stack=stack, others=others)


def records_data(groups: tuple[GroupPlan, ...]) -> dict[str, str]:
    """The ConfigMap keys a command writes for the node groups it names."""
    return {g.spec.name: record_of(g) for g in groups}


def others_of(names: set[str], recorded: dict[str, GroupPlan]) -> tuple[GroupPlan, ...]:
    """The recorded node groups a command does not name: they shape cluster-wide state, nothing acts on them."""
    return tuple(plan for name, plan in recorded.items() if name not in names)


def intended_labels(plan: GroupPlan) -> dict[str, str | None]:
    """The labels every node of the group must carry (None: must not carry): its device-plugin config, its
    MIG config where it has a layout, and its own labels."""
    labels: dict[str, str | None] = {CONFIG_LABEL: plan.sharing.config_key, **plan.labels}
    if plan.mig is not None:
        labels[L.MIG_CONFIG] = config_name(plan.mig)
    return labels


def node_drift(name: str, labels: dict[str, str], taints: set[tuple[str, str, str]], plan: GroupPlan) -> list[str]:
    """How a node differs from its group's record: each label and taint it lacks or carries wrongly."""
    drift = [f"{name} has {key}={labels.get(key, '(none)')}, its group wants {value or '(none)'}"
             for key, value in intended_labels(plan).items() if labels.get(key) != value]
    drift += [f"{name} lacks its group's taint {t}" for t in plan.spec.taints
              if (t.key, t.value or "", t.effect) not in taints]
    return drift


def with_recorded(spec: PlatformSpec, recorded: dict[str, GroupPlan], stack_strategy: str | None) -> PlatformSpec:
    """`spec` with what its command line left unsaid (spec.unstated) taken from the cluster's records: a recorded
    node group keeps its labels, taints and sharing or MIG layout where the command named none, as `kubectl
    label` and `helm upgrade --reuse-values` leave alone what they are not told. The MIG strategy, where unsaid,
    stays `stack_strategy` (the cluster's) where it fits every group, else is chosen from them. A spec file
    states the whole group: spec.unstated is empty and `spec` comes back as it is."""
    if not spec.unstated:
        return spec
    groups = []
    for plan in spec.groups:
        kept, old = plan, recorded.get(plan.spec.name)
        if old is not None:
            if "labels" in spec.unstated:
                kept = replace(kept, labels=dict(old.labels))
            if "taints" in spec.unstated:
                kept = replace(kept, spec=replace(kept.spec, taints=old.spec.taints))
            if "sharing" in spec.unstated and old.spec.gpu == plan.spec.gpu:  # a layout is of one GPU model
                kept = replace(kept, sharing=old.sharing, mig=old.mig)
        groups.append(kept)
    every = tuple(groups) + others_of({g.spec.name for g in groups}, recorded)
    sharing = [GroupSharing(g.spec.name, g.sharing.strategy, g.mig.profiles if g.mig else ()) for g in every]
    strategy = spec.stack.mig_strategy
    if "migStrategy" in spec.unstated:
        try:
            strategy = choose_mig_strategy(stack_strategy, sharing, "spec.gpuOperator.migStrategy")
        except UsageError:  # the cluster's no longer fits: chosen as for a new cluster
            strategy = choose_mig_strategy(None, sharing, "spec.gpuOperator.migStrategy")
    stack = replace(spec.stack, taints=all_taints(tuple(groups)), mig_strategy=strategy,
                    shares_gpus=any(g.sharing.config_key for g in groups))
    return replace(spec, groups=tuple(groups), stack=stack)
