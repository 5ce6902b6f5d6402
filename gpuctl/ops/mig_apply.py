"""`gpuctl mig apply`: validate a layout against every targeted node's GPU before any write, then
write the mig-parted config, label the nodes, wait for the MIG manager, and verify allocatable."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources, model_of, nodegroup_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import ensure_config_map_keys, read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.change import Change
from gpuctl.model.dra import GPU_CLASS, MIG_CLASS
from gpuctl.model.mig import (
    MigLayout,
    advertised_resources,
    check_layout_text,
    config_name,
    mig_parted_config,
    parse_layout,
    parse_mig_parted_config,
)
from gpuctl.model.naming import check_duration, check_name, check_selector
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.stack_spec import MIG_STRATEGY, GroupSharing, StackSpec, choose_mig_strategy
from gpuctl.ops.devices import NodeDevices, device_type, read_dra_serving, read_node_devices
from gpuctl.ops.group_records import read_group_plans
from gpuctl.ops.platform.gpu_stack import ensure_cluster_policy
from gpuctl.ops.platform.mig import label_mig_config, wait_for_mig_state
from gpuctl.ops.platform.results import Reporter, StepResult, run_step
from gpuctl.stack.existing import Operator, configured_operator
from gpuctl.stack.helm import HelmTarget, ensure_release
from gpuctl.stack.releases import operator_release
from gpuctl.stack.values import MIG_CONFIGMAP, NAMESPACE, STACK_CONFIGMAP, stack_from_record, stack_record
from gpuctl.util.errors import ClusterError, UsageError, ValidationFailed, shown
from gpuctl.util.output import info
from gpuctl.util.progress import waiting

if TYPE_CHECKING:
    from gpuctl.model.spec import GroupPlan

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class MigTarget:
    node: str
    model: GpuModel
    gpus: int
    layout: MigLayout


def plan_targets(nodes: list[KubeObject], text: str, strategy: str) -> list[MigTarget]:
    """Parse and place the layout for each node's GPU model; raise UsageError before any write."""
    targets = []
    for node in nodes:
        model = model_of(node.labels)
        if model is None:
            raise UsageError("LAYOUT", f"node {node.name} has an unknown GPU "
                             f"({node.labels.get(L.GPU_PRODUCT, '?')})", "target known GPU nodes")
        layout = parse_layout(text, model)
        labels = node.labels
        gpus = int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT, "1"))
        advertised_resources(layout, gpus, strategy)  # single strategy needs one profile: fail now
        targets.append(MigTarget(node.name, model, gpus, layout))
    names = {config_name(t.layout) for t in targets}
    if len(names) != 1 or len({tuple(t.layout.profiles) for t in targets}) != 1:
        raise UsageError("LAYOUT", f"{text!r} means different layouts on these GPU models "
                         f"({', '.join(sorted({t.model.name for t in targets}))})", "target one GPU model at a time")
    return targets


def check_mig_inputs(text: str, nodegroup: str | None, selector: str | None, strategy: str | None,
                     timeout: float | None) -> None:
    """Every input of `mig apply`, judged before the kubeconfig is read or a request made (what the layout
    means on each node's GPU is judged once the nodes are known, still before any write). Neither
    --nodegroup nor --selector: the node group is chosen from the cluster's (choose_nodegroup)."""
    check_layout_text(text)
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    if selector is not None:
        check_selector(selector, "--selector")
    if strategy is not None:
        choose_mig_strategy(strategy, [], "--strategy")  # the one rule for a strategy's name
    if timeout is not None:
        check_duration(timeout, "--timeout")


def apply_mig(kube: Kube, helm: HelmTarget, text: str, nodegroup: str | None, selector: str | None,
              strategy: str | None, timeout: float,
              report: Reporter) -> tuple[list[StepResult], dict[str, dict[str, int]]]:
    check_mig_inputs(text, nodegroup, selector, strategy, timeout)
    strategy = MIG_STRATEGY.check(strategy, "--strategy") if strategy is not None else None  # any case
    # Another's GPU Operator keeps gpuctl's ConfigMaps in its own namespace and takes settings through its
    # ClusterPolicy (see stack/owners.py); gpuctl's own reads them from gpu-operator and takes Helm values.
    operator = configured_operator(kube)
    namespace = operator.namespace if operator else NAMESPACE
    if nodegroup is None and selector is None:
        every = gpu_nodes(kube)
        chosen = choose_nodegroup(group_fits(every, read_group_plans(kube, namespace), text), text)
        info(f"mig apply: node group {chosen}")
        nodes = [n for n in every if nodegroup_of(n) == chosen.name]
    else:
        nodes = gpu_nodes(kube, nodegroup, selector)
    if not nodes:
        raise UsageError("--selector", f"no GPU nodes match {shown(selector)}",
                         "check the selector with 'gpuctl status'")
    record = read_config_map_data(kube, namespace, STACK_CONFIGMAP) or {}
    stack = stack_from_record(record["stack.json"]) if "stack.json" in record else None
    current_strategy = stack.mig_strategy if stack else None
    if strategy and stack is None:
        raise UsageError("--strategy", "the GPU Operator here was not installed by gpuctl",
                         "set mig.strategy in its values yourself, then rerun without --strategy")
    wanted_strategy = strategy or current_strategy or "single"
    targets = plan_targets(nodes, text, wanted_strategy)  # every check before the first write
    layout = targets[0].layout
    _check_mps(gpu_nodes(kube), {t.node for t in targets}, layout, wanted_strategy)
    name = config_name(layout)
    steps: list[StepResult] = []

    if stack is not None and wanted_strategy != stack.mig_strategy:
        from dataclasses import replace

        new_stack = replace(stack, mig_strategy=wanted_strategy)
        steps.append(run_step("set-mig-strategy", lambda: _set_strategy(kube, helm, new_stack, operator), report))
    steps.append(run_step("write-mig-config", lambda: _write_config(kube, layout, namespace), report))
    steps.append(run_step("label-nodes", lambda: label_mig_config(kube, nodes, name), report))
    steps.append(run_step("wait-mig-manager",
                          lambda: wait_for_mig_state(kube, [t.node for t in targets], name, timeout), report))
    # Per node (ops.devices.DraServing): the DRA driver publishes the MIG devices of the nodes it serves, the device
    # plugin advertises them on the others (a cluster where only some node groups are on DRA has both)
    serving = read_dra_serving(kube)
    on_dra = {n.name for n in nodes if serving.serves(n)}
    by_dra = {t.node: dra_devices(t.layout, t.gpus) for t in targets if t.node in on_dra}
    if by_dra:
        steps.append(run_step("verify-devices", lambda: _verify(
            by_dra, timeout, lambda: {n: published(d) for n, d in read_node_devices(kube).items()}, DEVICES),
            report))
    by_plugin = {t.node: {k: v for k, v in advertised_resources(t.layout, t.gpus, wanted_strategy).items() if v}
                 for t in targets if t.node not in on_dra}
    if by_plugin:
        steps.append(run_step("verify-allocatable", lambda: _verify(  # one LIST a look, not a GET per node
            by_plugin, timeout, lambda: {n.name: gpu_resources(n) for n in gpu_nodes(kube) if n.name in by_plugin},
            ALLOCATABLE), report))
    return steps, {**by_plugin, **by_dra}


@dataclass(frozen=True)
class GroupFit:
    """A node group as `mig apply` with no target weighs it: its GPU, its GPU nodes now, and why the layout
    does not fit it (None: it does)."""

    name: str
    gpu: str
    nodes: int
    unfit: str | None

    def __str__(self) -> str:
        return f"{self.name!r} ({self.gpu}, {self.nodes} node{'' if self.nodes == 1 else 's'})"


def group_fits(nodes: list[KubeObject], recorded: Mapping[str, GroupPlan], text: str) -> list[GroupFit]:
    """Every node group of the cluster, by name: those its GPU nodes' node-group labels name
    (gpuctl.dev/nodegroup or the provider's) and those gpuctl recorded (group_records), each weighed against
    the layout on its GPU's MIG geometry (gpuctl.model.mig), as --nodegroup would weigh it."""
    members: dict[str, list[KubeObject]] = {}
    for node in nodes:
        if (group := nodegroup_of(node)) is not None:
            members.setdefault(group, []).append(node)
    fits = []
    for name in sorted({*members, *recorded}):
        mine = members.get(name, [])
        models: set[GpuModel | None] = ({model_of(n.labels) for n in mine} if mine
                                        else {recorded[name].spec.gpu})
        gpu = ", ".join(sorted(m.name if m else "unknown GPU" for m in models))
        fits.append(GroupFit(name, gpu, len(mine), _unfit(models, len(mine), text)))
    return fits


def _unfit(models: set[GpuModel | None], nodes: int, text: str) -> str | None:
    if None in models:
        return "a GPU gpuctl's catalog does not know"
    if len(models) > 1:
        return "GPUs of several models"
    try:
        parse_layout(text, next(m for m in models if m is not None))
    except UsageError as err:
        return err.message.removeprefix(f"{err.field}: ")
    return None if nodes else "no GPU nodes now"


def choose_nodegroup(fits: list[GroupFit], text: str) -> GroupFit:
    """The one node group the layout fits; else a UsageError naming the groups there are (several fit: which;
    none fits: why not)."""
    fitting = [f for f in fits if f.unfit is None]
    if len(fitting) == 1:
        return fitting[0]
    if fitting:
        raise UsageError("--nodegroup", f"layout {shown(text)} fits {len(fitting)} node groups: "
                         f"{', '.join(map(str, fitting))}", "pass --nodegroup NAME to choose one")
    if not fits:
        raise UsageError("--nodegroup", "no GPU node group on this cluster",
                         "add one of MIG GPUs with 'gpuctl nodegroup add' (gpuctl gpus lists them), or pass "
                         "--selector LABELS for GPU nodes of no group")
    raise UsageError("LAYOUT", f"no node group takes {shown(text)}: "
                     + "; ".join(f"{f}: {f.unfit}" for f in fits),
                     "choose a layout one of them takes ('gpuctl mig validate LAYOUT --gpu GPU'), or add a node "
                     "group of MIG GPUs ('gpuctl nodegroup add')")


def _check_mps(cluster_nodes: list[KubeObject], targets: set[str], layout: MigLayout, strategy: str) -> None:
    """The device plugin refuses MPS on MIG devices and under the mixed strategy: check both before any write."""
    mps = {n.name: nodegroup_of(n) or n.name for n in cluster_nodes
           if (n.labels.get(CONFIG_LABEL) or "").startswith("mps-")}
    if layout.enabled and (shared := sorted(targets & set(mps))):
        raise UsageError("LAYOUT", f"node {shared[0]} shares its GPUs with MPS, which the device plugin refuses "
                         "on MIG devices", "apply the layout to a node group without MPS")
    groups = [GroupSharing(g, "mps") for g in sorted(set(mps.values()))]
    choose_mig_strategy(strategy, [*groups, GroupSharing("LAYOUT", "none", layout.profiles)], "--strategy")


def _set_strategy(kube: Kube, helm: HelmTarget, stack: StackSpec, operator: Operator | None) -> Change:

    if operator is None:
        change = ensure_release(helm, operator_release(stack))
    else:
        change = ensure_cluster_policy(kube, operator, stack)
    namespace = operator.namespace if operator else NAMESPACE
    ensure_config_map_keys(kube, namespace, STACK_CONFIGMAP, {"stack.json": stack_record(stack)})
    return change


def _write_config(kube: Kube, layout: MigLayout, namespace: str) -> Change:
    text = (read_config_map_data(kube, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    try:
        existing = parse_mig_parted_config(text) if text else {}
    except ValueError as exc:
        raise ClusterError(f"ConfigMap {namespace}/{MIG_CONFIGMAP} is not a mig-parted config: {exc}",
                           "fix or delete it") from None
    config = {"config.yaml": mig_parted_config([layout], existing)}
    return ensure_config_map_keys(kube, namespace, MIG_CONFIGMAP, config)[0]


def dra_devices(layout: MigLayout, gpus: int) -> dict[str, int]:
    """What the DRA driver publishes for `layout` on `gpus` GPUs: "<class>/<profile>" -> MIG devices, or
    the full GPUs (gpu.nvidia.com) where MIG is off."""
    if not layout.enabled:
        return {GPU_CLASS: gpus}
    return {f"{MIG_CLASS}/{profile}": count * gpus for profile, count in sorted(Counter(layout.profiles).items())}


def published(devices: NodeDevices | None) -> dict[str, int]:
    """A node's published devices counted as dra_devices counts them."""
    counts: Counter[str] = Counter()
    for device in devices.devices if devices is not None else ():
        attributes = device.get("attributes") or {}
        if device_type(device) == "mig":
            counts[f"{MIG_CLASS}/{(attributes.get('profile') or {}).get('string')}"] += 1
        elif device_type(device) == "gpu":
            counts[GPU_CLASS] += 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True)
class _Verified:
    """What a verification waits for, and its words: formats of {node} and {got}, and `empty` for no count."""

    what: str
    failure: str
    progress: str
    fix: str
    empty: str = "none"


ALLOCATABLE = _Verified("the MIG resources to be allocatable", "allocatable on {node} is {got}", "{node} has {got}",
                        "check the device-plugin pods after the MIG change", empty="{}")
DEVICES = _Verified("the DRA driver to publish the MIG devices", "the ResourceSlice of {node} publishes {got}",
                    "{node} publishes {got}", "check the DRA driver's kubelet-plugin pod on that node",
                    empty="no device")


def _verify(expected: dict[str, dict[str, int]], timeout: float, read: Callable[[], dict[str, dict[str, int]]],
            words: _Verified) -> Change:
    """Until every node of `expected` shows its counts in read() (node -> resource or device class -> count),
    for at most `timeout` seconds and never more than 60: ValidationFailed naming the first node that does not."""
    limit = min(timeout, 60.0)
    deadline = time.monotonic() + limit
    with waiting(words.what, limit) as wait:
        while True:
            found = read()
            wrong = {n: got for n in expected if (got := found.get(n, {})) != expected[n]}
            if not wrong:
                return Change.PASSED
            node, got = next(iter(wrong.items()))
            if time.monotonic() > deadline:
                raise ValidationFailed(f"{words.failure.format(node=node, got=got or words.empty)}, expected "
                                       f"{expected[node]}", words.fix)
            wait.update(f"{words.progress.format(node=node, got=got or 'none')}, expected {expected[node]}")
            time.sleep(0.5)
