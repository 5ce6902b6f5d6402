"""The full flow: node groups -> taints, labels and sharing -> GPU config -> NFD + GPU Operator ->
device-plugin restart when its config changed -> MIG layouts -> capacity -> tenants -> smoke test.
Each step observes first and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl import labels as L
from gpuctl.errors import ValidationFailed, WaitTimeout
from gpuctl.kube.client import api_client, api_error, core
from gpuctl.kube.objects import ensure_config_map_keys, ensure_namespace, read_config_map_data
from gpuctl.naming import check_duration, check_text
from gpuctl.mig import MigLayout, config_name, mig_parted_config, parse_mig_parted_config
from gpuctl.providers import get_provider
from gpuctl.providers.base import Change, Provider
from gpuctl.providers.options import CloudOptions
from gpuctl.sharing import CONFIG_LABEL, NO_SHARING, Sharing, plugin_configs
from gpuctl.spec import NodeGroupSpec
from gpuctl.stack.dra_driver import NAMESPACE as DRA_NAMESPACE
from gpuctl.stack.dra_driver import check_dra_mode, install_dra_driver
from gpuctl.stack.values import (DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP, NAMESPACE, STACK_CONFIGMAP, StackSpec,
                                 cluster_policy_fields, stack_record)
from gpuctl.steps import Reporter, StepResult, run_step
from gpuctl.taints import Taint
from gpuctl.tenants import Tenant, check_ownership, contains, ensure_tenant
from gpuctl.validate import (SMOKE_IMAGE, Check, check_capacity, check_device_plugins, expected_resources,
                             read_configs, validate_cluster)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.stack.existing import Operator
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.stack.owners import StackPlan

CAPACITY_TIMEOUT_S = 120.0
MIG_TIMEOUT_S = 300.0
LOCK_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class GroupPlan:
    """A node group (with its taints) and what the platform makes of it: sharing or a MIG layout, labels."""

    spec: NodeGroupSpec
    sharing: Sharing = NO_SHARING
    mig: MigLayout | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PlatformSpec:
    name: str
    cloud: str
    groups: tuple[GroupPlan, ...]
    stack: StackSpec  # its taints: every group's, for the operator's tolerations
    smoke_image: str = SMOKE_IMAGE
    validate: bool = True
    options: CloudOptions = field(default_factory=CloudOptions)
    tenants: tuple[Tenant, ...] = ()
    kueue: bool = False  # install Kueue, for the tenants' queues


def all_taints(groups: tuple[GroupPlan, ...]) -> tuple[Taint, ...]:
    """The union of the groups' taints: what the GPU stack's pods must tolerate."""
    return tuple(dict.fromkeys(t for g in groups for t in g.spec.taints))


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
    from gpuctl.kube.lock import cluster_lock
    from gpuctl.kubeconfig import check_kubeconfig, named, write_kubeconfig
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

    helm = HelmTarget(result.kubeconfig, entry["current-context"])
    # Another apply may be writing: lock, unless there is nothing to write (a re-apply stays write-free).
    from gpuctl.plan import plan_cluster

    for index, tenant in enumerate(spec.tenants):  # before any write to the cluster
        check_ownership(client, tenant, f"spec.tenants[{index}].adopt")
    # A GPU stack someone else installed is configured through, or refused (exit 2), before any write.
    stack_plan = check_single_owners(read_stack(client), spec.stack)
    planned = plan_cluster(spec, client, selectors, helm, stack_plan)  # DRA mode checked there too
    dra_owner = check_dra_mode(client, spec.stack)
    writes = any(p.action is not Change.NO_CHANGE for p in planned)
    with cluster_lock(client, name, lock_timeout) if writes else nullcontext():
        _cluster_steps(spec, provider, client, selectors, helm, step, result, stack_plan, dra_owner)
    return result


def _cluster_steps(spec: PlatformSpec, provider: Provider, client: ApiClient, selectors: dict[str, str],
                   helm: HelmTarget, step: Callable[[str, Callable[[], Change]], None], result: PlatformResult,
                   stack_plan: StackPlan, dra_owner: str | None) -> None:
    from gpuctl.output import info
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
        change, changed = write_gpu_config(v1, spec.stack, [g.sharing for g in spec.groups],
                                           [g.mig for g in spec.groups if g.mig], stack_plan.namespace)
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
    in_use = {g.sharing.config_key for g in spec.groups if g.sharing.config_key}
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
    # The smoke test proves a change; a converged cluster is left alone (`gpuctl validate` re-checks it).
    changed = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in result.steps)
    if spec.validate:
        for group in spec.groups:
            step(f"validate/{group.spec.name}",
                 lambda g=group: _validate(client, g.spec.name, spec, result.checks) if changed else Change.NO_CHANGE)


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


def gpu_config_data(stack: StackSpec, sharings: list[Sharing], layouts: list[MigLayout],
                    existing_mig: dict[str, dict[str, int] | None]) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data: the stack record, the device-plugin configs of these sharings (none at
    all without sharing), and the mig-parted configs of these layouts beside all-disabled and the
    `existing_mig` ones."""
    data = {STACK_CONFIGMAP: {"stack.json": stack_record(stack)},
            DEVICE_PLUGIN_CONFIGMAP: plugin_configs(sharings),
            MIG_CONFIGMAP: {"config.yaml": mig_parted_config(layouts, existing_mig)}}
    return {name: keys for name, keys in data.items() if keys}


def write_gpu_config(v1, stack: StackSpec, sharings: list[Sharing],  # noqa: ANN001
                     layouts: list[MigLayout], namespace: str = NAMESPACE) -> tuple[Change, set[str]]:
    """Write gpu_config_data into the GPU Operator's `namespace` where it differs; also return the
    device-plugin keys whose content changed (their consumers must restart)."""
    text = (read_config_map_data(v1, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    outcomes = [ensure_namespace(v1, namespace)]
    changed: set[str] = set()
    for name, data in gpu_config_data(stack, sharings, layouts, parse_mig_parted_config(text) if text else {}).items():
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
    from gpuctl.mig_apply import label_mig_config, wait_for_mig_state

    nodes = list_nodes_json(v1, selector)
    name = config_name(layout)
    change = label_mig_config(v1, nodes, name)
    wait_for_mig_state(v1, [n["metadata"]["name"] for n in nodes], name, MIG_TIMEOUT_S)
    return change


def _capacity_check(client: ApiClient, selector: str, dra: bool) -> tuple[Check, Check]:
    """(capacity, agents): allocatable against the configuration and the device plugins ready; in DRA mode
    the devices the DRA driver's slices publish and its kubelet plugins ready."""
    from gpuctl.status import DRA_PLUGIN_SELECTOR, pods_by_node, read_node_devices
    from gpuctl.validate import check_dra_capacity, check_kubelet_plugins

    v1 = core(client)
    plugin, mig = read_configs(client)
    nodes = v1.list_node(label_selector=selector).items
    if dra:
        return (check_dra_capacity(nodes, read_node_devices(client), mig),
                check_kubelet_plugins(nodes, pods_by_node(client, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin")))
    return (check_capacity(nodes, {n.metadata.name: expected_resources(n, plugin, mig) for n in nodes}),
            check_device_plugins(client))


def _wait_capacity(client: ApiClient, selector: str, checks: list[Check], dra: bool) -> Change:
    """Until the nodes offer what was configured (allocatable, or in DRA mode published devices) and every
    device-plugin (kubelet-plugin) pod is ready: a restarted pod serves before its DaemonSet counts it ready."""
    from gpuctl.progress import waiting

    what = "DRA devices" if dra else "allocatable GPUs"
    deadline = time.monotonic() + CAPACITY_TIMEOUT_S
    with waiting(f"{what} on nodes {selector}", CAPACITY_TIMEOUT_S) as wait:
        while True:
            check, agents = _capacity_check(client, selector, dra)
            if (check.ok and agents.ok) or time.monotonic() >= deadline:
                break
            wait.update(agents.detail if check.ok else check.detail)
            time.sleep(0.5)
    checks.append(check)
    if not check.ok:
        where = (f"the DRA driver's kubelet-plugin pods (namespace {DRA_NAMESPACE})" if dra
                 else "the device-plugin pods in namespace gpu-operator")
        raise WaitTimeout(f"{what} on nodes {selector} did not reach the configuration within "
                          f"{CAPACITY_TIMEOUT_S:.0f}s: {check.detail}", f"check {where}")
    return Change.NO_CHANGE  # waiting changes nothing; the results are checks


def _validate(client: ApiClient, group: str, spec: PlatformSpec, checks: list[Check]) -> Change:
    new = validate_cluster(client, group, spec.smoke_image)
    checks.extend(new)
    failed = [c for c in new if not c.ok]
    if failed:
        raise ValidationFailed(f"validation failed: {failed[0].name}: {failed[0].detail}")
    return Change.PASSED
