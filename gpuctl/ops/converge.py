"""The idempotent cluster-side actions of `apply`: each observes first and writes only a difference.

Below apply (ops.platform), plan (ops.plan), their step list (ops.platform_steps) and `mig apply`
(ops.mig_apply), which all use these; it imports none of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.nodes import converge_nodes
from gpuctl.kube.objects import contains, ensure_config_map_keys, ensure_namespace, read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.model.mig import mig_parted_config, parse_mig_parted_config
from gpuctl.model.sharing import CONFIG_LABEL, Sharing, plugin_configs
from gpuctl.model.spec import GroupPlan, PlatformSpec, all_taints
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import Taint
from gpuctl.stack.values import (
    DEVICE_PLUGIN_CONFIGMAP,
    MIG_CONFIGMAP,
    NAMESPACE,
    STACK_CONFIGMAP,
    cluster_policy_fields,
    stack_record,
)

if TYPE_CHECKING:
    from gpuctl.providers.base import Provider, RunsKueue
    from gpuctl.stack.existing import Operator
    from gpuctl.stack.helm import HelmTarget


def with_cluster_groups(spec: PlatformSpec, recorded: dict[str, GroupPlan]) -> PlatformSpec:
    """`spec` with the cluster's other recorded node groups: the operator tolerates their taints too, serves
    gpuctl's configs where any group shares, under one MIG strategy for all (refused when none fits)."""
    from gpuctl.model.stack_spec import GroupSharing, choose_mig_strategy
    from gpuctl.ops.group_records import others_of

    others = others_of({g.spec.name for g in spec.groups}, recorded)
    if not others:
        return spec
    every = spec.groups + others
    strategy = choose_mig_strategy(spec.stack.mig_strategy, [
        GroupSharing(g.spec.name, g.sharing.strategy, g.mig.profiles if g.mig else ()) for g in every],
        "spec.gpuOperator.migStrategy (--mig-strategy)")
    stack = replace(spec.stack, taints=all_taints(every), mig_strategy=strategy,
                    shares_gpus=any(g.sharing.config_key for g in every))
    return replace(spec, stack=stack, others=others)


def read_recorded_groups(kube: Kube) -> dict[str, GroupPlan]:
    """The node groups recorded on the cluster (in the namespace of the GPU configs gpuctl writes)."""
    from gpuctl.ops.group_records import read_group_plans
    from gpuctl.stack.existing import config_namespace

    return read_group_plans(kube, config_namespace(kube))


def read_recorded_stack(kube: Kube) -> StackSpec | None:
    """How gpuctl last set up the cluster's GPU stack (its record beside the GPU configs); None where it has not."""
    from gpuctl.stack.existing import config_namespace
    from gpuctl.stack.values import stack_from_record

    record = read_config_map_data(kube, config_namespace(kube), STACK_CONFIGMAP) or {}
    return stack_from_record(record["stack.json"]) if "stack.json" in record else None


def configure_nodes(kube: Kube, selector: str, sharing: Sharing, taints: tuple[Taint, ...],
                    labels: dict[str, str] | None = None) -> Change:
    """Taints, the device-plugin config label and the group's labels: one patch per node that differs."""
    update = converge_nodes(kube, selector, {CONFIG_LABEL: sharing.config_key, **(labels or {})}, taints)
    return Change.UPDATED if update.patched else Change.NO_CHANGE


def gpu_config_data(spec: PlatformSpec, existing_mig: dict[str, dict[str, int] | None]) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data: the stack record, the device-plugin configs of every group's sharing (none
    at all without sharing), the mig-parted configs of their layouts beside all-disabled and the
    `existing_mig` ones, and the records of the node groups `spec` names."""
    from gpuctl.ops.group_records import GROUPS_CONFIGMAP, records_data

    every = spec.every_group
    data = {STACK_CONFIGMAP: {"stack.json": stack_record(spec.stack)},
            DEVICE_PLUGIN_CONFIGMAP: plugin_configs([g.sharing for g in every]),
            MIG_CONFIGMAP: {"config.yaml": mig_parted_config([g.mig for g in every if g.mig], existing_mig)},
            GROUPS_CONFIGMAP: records_data(spec.groups)}
    return {name: keys for name, keys in data.items() if keys}


def wanted_gpu_config(kube: Kube, spec: PlatformSpec, namespace: str) -> dict[str, dict[str, str]]:
    """gpu_config_data with the MIG layouts the cluster's mig-parted config holds now (they stay)."""
    text = (read_config_map_data(kube, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    return gpu_config_data(spec, parse_mig_parted_config(text) if text else {})


def write_gpu_config(kube: Kube, spec: PlatformSpec, namespace: str = NAMESPACE) -> tuple[Change, set[str]]:
    """Write gpu_config_data into the GPU Operator's `namespace` where it differs; also return the
    device-plugin keys whose content changed (their consumers must restart)."""
    outcomes = [ensure_namespace(kube, namespace)]
    changed: set[str] = set()
    for name, data in wanted_gpu_config(kube, spec, namespace).items():
        outcome, keys = ensure_config_map_keys(kube, namespace, name, data)
        outcomes.append(outcome)
        if name == DEVICE_PLUGIN_CONFIGMAP:
            changed = keys
    return (Change.NO_CHANGE if all(o is Change.NO_CHANGE for o in outcomes) else Change.UPDATED), changed


def configs_in_use(spec: PlatformSpec) -> set[str]:
    """The device-plugin config keys some node group (recorded ones too) points its nodes at."""
    return {g.sharing.config_key for g in spec.every_group if g.sharing.config_key}


def restart_device_plugin(kube: Kube, changed_in_use: set[str], namespace: str = NAMESPACE) -> Change:
    """The device plugin does not reload an edited config: restart its pods when one in use changed."""
    if not changed_in_use:
        return Change.NO_CHANGE
    with requesting("restarting the device-plugin pods"):
        kube.delete_all("v1", "Pod", namespace, labels=f"app={L.DEVICE_PLUGIN_APP}")
    return Change.UPDATED


def cluster_policy_drift(spec: dict[str, Any], stack: StackSpec) -> dict[str, Any] | None:
    """The fields gpuctl applies to another's ClusterPolicy when `spec` lacks one of them, else None.
    Without sharing gpuctl applies no devicePlugin.config, so server-side apply drops the one it set."""
    wanted = cluster_policy_fields(stack)
    gone = "devicePlugin" not in wanted and \
        ((spec.get("devicePlugin") or {}).get("config") or {}).get("name") == DEVICE_PLUGIN_CONFIGMAP
    return None if contains(spec, wanted) and not gone else wanted


def read_cluster_policy(kube: Kube, name: str) -> dict[str, Any]:
    """The spec of ClusterPolicy `name`."""
    from gpuctl.stack.existing import CLUSTER_POLICY

    return kube.get("/".join(CLUSTER_POLICY[:2]), "ClusterPolicy", name).spec


def ensure_cluster_policy(kube: Kube, operator: Operator, stack: StackSpec) -> Change:
    """Point another's GPU Operator at gpuctl's configs: server-side apply of only the fields gpuctl
    sets (field manager gpuctl), so the owner's other settings stay as they are."""
    from gpuctl.stack.existing import CLUSTER_POLICY

    name = operator.policy
    assert name is not None  # check_single_owners refuses an operator without one
    wanted = cluster_policy_drift(read_cluster_policy(kube, name), stack)
    if wanted is None:
        return Change.NO_CHANGE
    body = {"apiVersion": "/".join(CLUSTER_POLICY[:2]), "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": wanted}
    with requesting(f"configuring ClusterPolicy {name}"):
        kube.apply(body)
    return Change.UPDATED


def install_kueue(provider: Provider, cluster: str, helm: HelmTarget, charts: str) -> Change:
    """Kueue's chart through Helm; the sim instead runs Kueue's CRDs and controller itself."""
    from gpuctl.stack.helm import ensure_release
    from gpuctl.stack.kueue import kueue_release

    if provider.capabilities.runs_kueue:
        return cast("RunsKueue", provider).ensure_kueue(cluster)
    return ensure_release(helm, kueue_release(charts))
