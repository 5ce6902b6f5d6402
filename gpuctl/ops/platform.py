"""The full flow: node groups -> taints, labels and sharing -> GPU config -> NFD + GPU Operator ->
device-plugin restart when its config changed -> MIG layouts -> capacity -> tenants -> smoke test.
Each step observes first and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.model import labels as L
from gpuctl.util.errors import ValidationFailed
from gpuctl.kube.client import api_client, api_error, core
from gpuctl.kube.objects import ensure_config_map_keys, ensure_namespace, read_config_map_data
from gpuctl.model.naming import check_duration, check_text
from gpuctl.model.mig import MigLayout, config_name, mig_parted_config, parse_mig_parted_config
from gpuctl.providers import get_provider
from gpuctl.model.change import Change
from gpuctl.providers.base import Provider
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.sharing import CONFIG_LABEL, Sharing, plugin_configs
from gpuctl.model.spec import GroupPlan, PlatformSpec, all_taints
from gpuctl.stack.dra_driver import check_dra_mode, install_dra_driver
from gpuctl.stack.values import (DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP, NAMESPACE, STACK_CONFIGMAP, cluster_policy_fields, stack_record)
from gpuctl.model.stack_spec import StackSpec
from gpuctl.ops.steps import Reporter, StepResult, run_step
from gpuctl.model.taints import Taint
from gpuctl.ops.validation_record import forget_validated, read_validated, record_validated, spec_digest
from gpuctl.model.tenant import Tenant
from gpuctl.ops.tenancy.tenants import check_ownership, contains, ensure_tenant
from gpuctl.ops.capacity import wait_capacity as _wait_capacity
from gpuctl.model.spec import SMOKE_IMAGE
from gpuctl.ops.validate import Check, validate_cluster

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.stack.existing import Operator
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.stack.owners import StackPlan

LOCK_TIMEOUT_S = 300.0


def with_cluster_groups(spec: PlatformSpec, recorded: dict[str, GroupPlan]) -> PlatformSpec:
    """`spec` with the cluster's other recorded node groups: the operator tolerates their taints too, serves
    gpuctl's configs where any group shares, under one MIG strategy for all (refused when none fits)."""
    from gpuctl.ops.group_records import others_of
    from gpuctl.model.stack_spec import GroupSharing, choose_mig_strategy

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


@dataclass
class PlatformResult:
    steps: list[StepResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    kubeconfig: Path | None = None


def apply_platform(spec: PlatformSpec, kubeconfig: Path | None, report: Reporter,
                   lock_timeout: float = LOCK_TIMEOUT_S, context: str | None = None) -> PlatformResult:
    """Converge the cluster to `spec`; its context (named `context`, else the provider's name) is
    merged into `kubeconfig` (else the default file)."""
    # The lock, kubeconfig and Helm machinery load here: `render` and `--export-spec` never need them.
    from gpuctl.kube.lock import clear_dead_holder, cluster_lock
    from gpuctl.kube.kubeconfig import check_kubeconfig, named, write_kubeconfig
    from gpuctl.stack.existing import read_stack
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.stack.owners import check_single_owners

    check_duration(lock_timeout, "--lock-timeout")
    if context is not None:
        check_text(context, "--context", maximum=253)
    check_kubeconfig(kubeconfig)
    provider = get_provider(spec.cloud, spec.options)
    name = spec.name
    result = PlatformResult()

    def step(title: str, action: Callable[[], Change]) -> None:
        result.steps.append(run_step(title, action, report))

    for group in spec.groups:  # every input checked before anything is touched
        provider.check_node_group(group.spec)
    provider.check_credentials()  # exit 3 with the fix
    step("ensure-cluster", lambda: provider.ensure_cluster(name))
    for group in spec.groups:
        step(f"ensure-nodegroup/{group.spec.name}", lambda g=group: provider.ensure_node_group(name, g.spec))
    entry = named(provider.kubeconfig(name), context)

    def kubeconfig_step() -> Change:
        path, changed = write_kubeconfig(entry, kubeconfig)
        result.kubeconfig = path
        return Change.UPDATED if changed else Change.NO_CHANGE

    step("write-kubeconfig", kubeconfig_step)
    client = api_client(result.kubeconfig, entry["current-context"])
    selectors = {g.spec.name: provider.node_selector(g.spec.name) for g in spec.groups}
    spec = with_cluster_groups(spec, read_recorded_groups(client))

    helm = HelmTarget(result.kubeconfig, entry["current-context"])
    # Another apply may be writing: lock, unless there is nothing to write (a re-apply stays write-free).
    from gpuctl.ops.plan import plan_cluster

    for index, tenant in enumerate(spec.tenants):  # before any write to the cluster
        check_ownership(client, tenant, f"spec.tenants[{index}].adopt", kueue_coming=spec.kueue)
    # A GPU stack someone else installed is configured through, or refused (exit 2), before any write.
    stack_plan = check_single_owners(read_stack(client), spec.stack)
    planned = plan_cluster(spec, client, selectors, helm, stack_plan)  # DRA mode checked there too
    dra_owner = check_dra_mode(client, spec.stack)
    cleared = clear_dead_holder(client)  # converged or not: no later apply waits out a killed one's lock
    if cleared:
        from gpuctl.util.output import info

        info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
    v1, namespace = core(client), stack_plan.namespace
    digest = spec_digest(spec)
    validated = read_validated(v1, namespace) == digest
    writes = any(p.action is not Change.NO_CHANGE for p in planned) or _changed(result)
    with cluster_lock(client, name, lock_timeout) if writes else nullcontext():
        if writes:
            forget_validated(v1, namespace)
        _cluster_steps(spec, provider, client, selectors, helm, step, result, stack_plan, dra_owner,
                       must_validate=not validated)
        if any(s.name.startswith("validate/") and s.outcome is Change.PASSED for s in result.steps):
            record_validated(v1, namespace, digest)  # (a failed validation raised)
    return result


def _changed(result: PlatformResult) -> bool:
    return any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in result.steps)


def _cluster_steps(spec: PlatformSpec, provider: Provider, client: ApiClient, selectors: dict[str, str],
                   helm: HelmTarget, step: Callable[[str, Callable[[], Change]], None], result: PlatformResult,
                   stack_plan: StackPlan, dra_owner: str | None, must_validate: bool) -> None:
    from gpuctl.util.output import info
    from gpuctl.stack.helm import ensure_release
    from gpuctl.stack.releases import nfd_release, operator_release

    v1 = core(client)
    for title, action in provider.cluster_steps(spec.name, client):
        step(title, action)
    for group in spec.groups:
        step(f"configure-nodes/{group.spec.name}",
             lambda g=group: configure_nodes(v1, selectors[g.spec.name], g.sharing, g.spec.taints, g.labels))
    changed_keys: set[str] = set()

    def gpu_config_step() -> Change:
        change, changed = write_gpu_config(v1, spec, stack_plan.namespace)
        changed_keys.update(changed)
        return change

    step("write-gpu-config", gpu_config_step)
    if stack_plan.nfd is not None:
        info(f"  {stack_plan.nfd_note()}")
        step("use-existing-nfd", lambda: Change.NO_CHANGE)
    elif spec.stack.nfd == "standalone":
        step("install-nfd", lambda: ensure_release(helm, nfd_release(spec.stack)))
    if stack_plan.operator is not None:
        info(f"  {stack_plan.operator_note()}")
        step("configure-gpu-operator", lambda: ensure_cluster_policy(client, stack_plan.operator, spec.stack))
    else:
        step("install-gpu-operator", lambda: ensure_release(helm, operator_release(spec.stack)))
    if spec.stack.dra:
        if dra_owner is not None:
            info(f"  uses the DRA driver of {dra_owner}")
        step("install-dra-driver", lambda: install_dra_driver(helm, spec.stack, dra_owner))
    in_use = {g.sharing.config_key for g in spec.every_group if g.sharing.config_key}
    step("restart-device-plugin", lambda: _restart_device_plugin(v1, changed_keys & in_use, stack_plan.namespace))
    for group in spec.groups:
        if group.mig is not None:
            step(f"apply-mig/{group.spec.name}",
                 lambda g=group: _apply_mig(v1, selectors[g.spec.name], g.mig))  # type: ignore[arg-type]
    for group in spec.groups:
        step(f"wait-capacity/{group.spec.name}",
             lambda g=group: _wait_capacity(client, selectors[g.spec.name], result.checks, spec.stack.dra))
    if spec.kueue:  # before the tenants: their queues need Kueue's API
        step("install-kueue", lambda: install_kueue(provider, spec.name, helm, spec.stack.charts))
    for index, tenant in enumerate(spec.tenants):
        step(f"ensure-tenant/{tenant.name}", lambda t=tenant, i=index: ensure_tenant(
            client, t, adopt_field=f"spec.tenants[{i}].adopt"))
    # The smoke test proves a change, or a platform not validated since its last one (a killed run); a
    # converged, validated cluster is left alone (`gpuctl validate` re-checks it).
    changed = must_validate or _changed(result)
    if spec.validate:
        for group in spec.groups:
            step(f"validate/{group.spec.name}",
                 lambda g=group: _validate(client, g.spec.name, spec, result.checks) if changed else Change.NO_CHANGE)


def configure_recorded_group(client: ApiClient, selector: str, name: str) -> Change:
    """Bring the nodes of node group `name` (a scaled one's new nodes) to its recorded configuration: taints,
    labels, sharing, and its MIG layout applied, and wait until they advertise it. NO_CHANGE where nothing is
    recorded for the group."""
    plan = read_recorded_groups(client).get(name)
    if plan is None:
        return Change.NO_CHANGE
    from gpuctl.kube.dra import dra_mode

    v1 = core(client)
    change = configure_nodes(v1, selector, plan.sharing, plan.spec.taints, plan.labels)
    if plan.mig is not None and _apply_mig(v1, selector, plan.mig) is not Change.NO_CHANGE:
        change = Change.UPDATED
    _wait_capacity(client, selector, [], dra_mode(client))  # done means advertised, as after apply
    return change


def forget_recorded_group(client: ApiClient, name: str) -> Change:
    from gpuctl.ops.group_records import GROUPS_CONFIGMAP
    from gpuctl.kube.objects import remove_config_map_key
    from gpuctl.stack.existing import config_namespace

    return remove_config_map_key(core(client), config_namespace(client), GROUPS_CONFIGMAP, name)


def install_kueue(provider: Provider, cluster: str, helm: HelmTarget, charts: str) -> Change:
    """Kueue's chart through Helm; the sim instead runs Kueue's CRDs and controller itself."""
    from gpuctl.stack.helm import ensure_release
    from gpuctl.stack.kueue import kueue_release

    run_kueue = getattr(provider, "ensure_kueue", None)  # only the sim has one
    if run_kueue is not None:
        return run_kueue(cluster)
    return ensure_release(helm, kueue_release(charts))


def configure_nodes(v1, selector: str, sharing: Sharing, taints: tuple[Taint, ...],  # noqa: ANN001
                    labels: dict[str, str] | None = None) -> Change:
    """Taints, the device-plugin config label and the group's labels: one patch per node that differs."""
    from gpuctl.kube.nodes import converge_nodes

    update = converge_nodes(v1, selector, {CONFIG_LABEL: sharing.config_key, **(labels or {})}, taints)
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


def read_recorded_groups(client: ApiClient) -> dict[str, GroupPlan]:
    """The node groups recorded on the cluster (in the namespace of the GPU configs gpuctl writes)."""
    from gpuctl.ops.group_records import read_group_plans
    from gpuctl.stack.existing import config_namespace

    return read_group_plans(core(client), config_namespace(client))


def write_gpu_config(v1, spec: PlatformSpec, namespace: str = NAMESPACE) -> tuple[Change, set[str]]:  # noqa: ANN001
    """Write gpu_config_data into the GPU Operator's `namespace` where it differs; also return the
    device-plugin keys whose content changed (their consumers must restart)."""
    text = (read_config_map_data(v1, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    outcomes = [ensure_namespace(v1, namespace)]
    changed: set[str] = set()
    for name, data in gpu_config_data(spec, parse_mig_parted_config(text) if text else {}).items():
        outcome, keys = ensure_config_map_keys(v1, namespace, name, data)
        outcomes.append(outcome)
        if name == DEVICE_PLUGIN_CONFIGMAP:
            changed = keys
    return (Change.NO_CHANGE if all(o is Change.NO_CHANGE for o in outcomes) else Change.UPDATED), changed


def cluster_policy_drift(spec: dict[str, Any], stack: StackSpec) -> dict[str, Any] | None:
    """The fields gpuctl applies to another's ClusterPolicy when `spec` lacks one of them, else None.
    Without sharing gpuctl applies no devicePlugin.config, so server-side apply drops the one it set."""
    wanted = cluster_policy_fields(stack)
    gone = "devicePlugin" not in wanted and \
        ((spec.get("devicePlugin") or {}).get("config") or {}).get("name") == DEVICE_PLUGIN_CONFIGMAP
    return None if contains(spec, wanted) and not gone else wanted


def ensure_cluster_policy(client: ApiClient, operator: Operator, stack: StackSpec) -> Change:
    """Point another's GPU Operator at gpuctl's configs: server-side apply of only the fields gpuctl
    sets (field manager gpuctl), so the owner's other settings stay as they are."""
    from kubernetes.client import CustomObjectsApi

    from gpuctl.kube.objects import APPLY_PATCH
    from gpuctl.stack.existing import CLUSTER_POLICY

    custom = CustomObjectsApi(client)
    name = operator.policy
    try:
        current = custom.get_cluster_custom_object(*CLUSTER_POLICY, name)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"reading ClusterPolicy {name}") from None
    wanted = cluster_policy_drift(current.get("spec") or {}, stack)
    if wanted is None:
        return Change.NO_CHANGE
    body = {"apiVersion": "/".join(CLUSTER_POLICY[:2]), "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": wanted}
    try:
        custom.patch_cluster_custom_object(*CLUSTER_POLICY, name, body, field_manager=L.MANAGER, force=True,
                                           _content_type=APPLY_PATCH)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"configuring ClusterPolicy {name}") from None
    return Change.UPDATED


def _restart_device_plugin(v1, changed_in_use: set[str], namespace: str = NAMESPACE) -> Change:  # noqa: ANN001
    """The device plugin does not reload an edited config: restart its pods when one in use changed."""
    if not changed_in_use:
        return Change.NO_CHANGE
    try:
        v1.delete_collection_namespaced_pod(namespace, label_selector=f"app={L.DEVICE_PLUGIN_APP}")
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "restarting the device-plugin pods") from None
    return Change.UPDATED


def _apply_mig(v1, selector: str, layout: MigLayout) -> Change:  # noqa: ANN001
    from gpuctl.kube.nodes import list_nodes_json
    from gpuctl.ops.mig_apply import label_mig_config, wait_for_mig_state

    nodes = list_nodes_json(v1, selector)
    name = config_name(layout)
    change = label_mig_config(v1, nodes, name)
    wait_for_mig_state(v1, [n["metadata"]["name"] for n in nodes], name, None)  # until progress stalls, or --timeout
    return change


def _validate(client: ApiClient, group: str, spec: PlatformSpec, checks: list[Check]) -> Change:
    new = validate_cluster(client, group, spec.smoke_image)
    checks.extend(new)
    failed = [c for c in new if not c.ok]
    if failed:
        raise ValidationFailed(f"validation failed: {failed[0].name}: {failed[0].detail}")
    return Change.PASSED
