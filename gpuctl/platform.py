"""The full flow: node groups -> taints and sharing labels -> GPU config -> NFD + GPU Operator ->
device-plugin restart when its config changed -> capacity -> smoke test. Each step observes first
and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.errors import ValidationFailed, WaitTimeout
from gpuctl.kube.client import api_client, api_error, core
from gpuctl.kube.nodes import converge_nodes
from gpuctl.kube.objects import ensure_config_map_keys, ensure_namespace, read_config_map_data
from gpuctl.kubeconfig import write_kubeconfig
from gpuctl.mig import mig_parted_config
from gpuctl.providers import get_provider
from gpuctl.providers.base import Change
from gpuctl.providers.options import CloudOptions
from gpuctl.sharing import CONFIG_LABEL, Sharing, render_plugin_config
from gpuctl.spec import ClusterSpec
from gpuctl.stack.helm import HelmTarget, ensure_release
from gpuctl.stack.owners import check_single_owners
from gpuctl.stack.releases import nfd_release, operator_release
from gpuctl.stack.values import (DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP, NAMESPACE, STACK_CONFIGMAP, StackSpec,
                                 stack_record)
from gpuctl.steps import Reporter, StepResult, run_step
from gpuctl.taints import Taint
from gpuctl.validate import SMOKE_IMAGE, Check, check_capacity, expected_resources, read_configs, validate_cluster

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

PLUGIN_SELECTOR = "app=nvidia-device-plugin-daemonset"
CAPACITY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class PlatformSpec:
    cluster: ClusterSpec
    stack: StackSpec
    sharing: Sharing
    smoke_image: str = SMOKE_IMAGE
    validate: bool = True
    options: CloudOptions = field(default_factory=CloudOptions)


@dataclass
class PlatformResult:
    steps: list[StepResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    kubeconfig: Path | None = None


def apply_platform(spec: PlatformSpec, kubeconfig: Path | None, report: Reporter) -> PlatformResult:
    provider = get_provider(spec.cluster.cloud, spec.options)
    name = spec.cluster.name
    result = PlatformResult()

    def step(title: str, action) -> None:  # noqa: ANN001 - Callable[[], Change]
        result.steps.append(run_step(title, action, report))

    provider.check_credentials()  # exit 3 with the fix before anything is touched
    step("ensure-cluster", lambda: provider.ensure_cluster(name))
    for group in spec.cluster.node_groups:
        step(f"ensure-nodegroup/{group.name}", lambda g=group: provider.ensure_node_group(name, g))
    entry = provider.kubeconfig(name)

    def kubeconfig_step() -> Change:
        path, changed = write_kubeconfig(entry, kubeconfig)
        result.kubeconfig = path
        return Change.UPDATED if changed else Change.NO_CHANGE

    step("write-kubeconfig", kubeconfig_step)
    client = api_client(result.kubeconfig, entry["current-context"])
    v1 = core(client)
    selectors = {g.name: provider.node_selector(g.name) for g in spec.cluster.node_groups}

    for title, action in provider.cluster_steps(name, client):
        step(title, action)
    for group, selector in selectors.items():
        step(f"configure-nodes/{group}", lambda s=selector: configure_nodes(v1, s, spec.sharing, spec.stack.taints))
    changed_keys: set[str] = set()

    def gpu_config_step() -> Change:
        change, changed = write_gpu_config(v1, spec.stack, spec.sharing)
        changed_keys.update(changed)
        return change

    step("write-gpu-config", gpu_config_step)
    helm = HelmTarget(result.kubeconfig, entry["current-context"])
    check_single_owners(client, spec.stack)
    if spec.stack.nfd == "standalone":
        step("install-nfd", lambda: ensure_release(helm, nfd_release(spec.stack)))
    step("install-gpu-operator", lambda: ensure_release(helm, operator_release(spec.stack)))
    step("restart-device-plugin", lambda: _restart_device_plugin(v1, changed_keys, spec.sharing))
    for group, selector in selectors.items():
        step(f"wait-capacity/{group}", lambda s=selector: _wait_capacity(client, s, result.checks))
    if spec.validate:
        for group, selector in selectors.items():
            step(f"validate/{group}", lambda g=group: _validate(client, g, spec, result.checks))
    return result


def configure_nodes(v1, selector: str, sharing: Sharing, taints: tuple[Taint, ...]) -> Change:  # noqa: ANN001
    """Taints and the device-plugin config label on a node group: one patch per node that differs."""
    update = converge_nodes(v1, selector, {CONFIG_LABEL: sharing.config_key}, taints)
    return Change.UPDATED if update.patched else Change.NO_CHANGE


def write_gpu_config(v1, stack: StackSpec, sharing: Sharing) -> tuple[Change, set[str]]:  # noqa: ANN001
    """The device-plugin config for this sharing, a mig-parted ConfigMap (all-disabled at least), and
    the record of how the stack is installed. Also returns the config keys whose content changed."""
    outcomes = [ensure_namespace(v1, NAMESPACE),
                ensure_config_map_keys(v1, NAMESPACE, STACK_CONFIGMAP, {"stack.json": stack_record(stack)})[0]]
    plugin_data = {sharing.config_key: render_plugin_config(sharing)} if sharing.config_key else {}
    outcome, changed = ensure_config_map_keys(v1, NAMESPACE, DEVICE_PLUGIN_CONFIGMAP, plugin_data)
    outcomes.append(outcome)
    if read_config_map_data(v1, NAMESPACE, MIG_CONFIGMAP) is None:
        outcomes.append(ensure_config_map_keys(v1, NAMESPACE, MIG_CONFIGMAP, {"config.yaml": mig_parted_config([])})[0])
    return (Change.NO_CHANGE if all(o is Change.NO_CHANGE for o in outcomes) else Change.UPDATED), changed


def _restart_device_plugin(v1, changed_keys: set[str], sharing: Sharing) -> Change:  # noqa: ANN001
    """The device plugin does not reload an edited config: restart its pods when one in use changed."""
    if sharing.config_key not in changed_keys:
        return Change.NO_CHANGE
    try:
        v1.delete_collection_namespaced_pod(NAMESPACE, label_selector=PLUGIN_SELECTOR)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "restarting the device-plugin pods") from None
    return Change.UPDATED


def _capacity_check(client: ApiClient, selector: str) -> Check:
    v1 = core(client)
    plugin, mig = read_configs(client)
    nodes = v1.list_node(label_selector=selector).items
    return check_capacity(nodes, {n.metadata.name: expected_resources(n, plugin, mig) for n in nodes})


def _wait_capacity(client: ApiClient, selector: str, checks: list[Check]) -> Change:
    deadline = time.monotonic() + CAPACITY_TIMEOUT_S
    check = _capacity_check(client, selector)
    while not check.ok and time.monotonic() < deadline:
        time.sleep(0.5)
        check = _capacity_check(client, selector)
    checks.append(check)
    if not check.ok:
        raise WaitTimeout(f"allocatable GPUs did not reach the configuration within {CAPACITY_TIMEOUT_S:.0f}s: "
                          f"{check.detail}", "check the device-plugin pods in namespace gpu-operator")
    return Change.PASSED


def _validate(client: ApiClient, group: str, spec: PlatformSpec, checks: list[Check]) -> Change:
    new = validate_cluster(client, group, spec.smoke_image)
    checks.extend(new)
    failed = [c for c in new if not c.ok]
    if failed:
        raise ValidationFailed(f"validation failed: {failed[0].name}: {failed[0].detail}")
    return Change.PASSED
