"""The Python API of gpuctl; the CLI is a thin layer over these functions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

# Only the model loads with this module: `render` and `--export-spec` stay fast (bench/startup); operations,
# providers and the Kubernetes client load in the functions that use them.
from gpuctl.model import specfile
from gpuctl.model.change import Change
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import SMOKE_IMAGE, GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.specfile import GpuClusterDoc, ValidGroup, export_spec
from gpuctl.model.tenant import Tenant, TenantUpdate
from gpuctl.util.output import reporting

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from kubernetes.client import ApiClient

    from gpuctl.ops.plan import PlannedStep
    from gpuctl.ops.platform import PlatformResult
    from gpuctl.ops.smoke import Check
    from gpuctl.ops.steps import Reporter, StepResult
    from gpuctl.providers.base import ClusterInfo, NodeGroupInfo, Provider
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.tools.installer import InstalledTool

# The result types of the API, loaded with the operations that make them.
_TYPES = {"PlannedStep": "gpuctl.ops.plan", "PlatformResult": "gpuctl.ops.platform", "StepResult": "gpuctl.ops.steps"}


def __getattr__(name: str) -> object:
    if name not in _TYPES:
        raise AttributeError(f"module 'gpuctl.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_TYPES[name]), name)

__all__ = ["CloudOptions", "GroupPlan", "PlannedStep", "PlatformResult", "PlatformSpec", "Tenant", "add_node_group",
           "apply_mig", "apply_platform", "delete_cluster", "delete_node_group", "ensure_tenant", "export_spec",
           "get_node_group", "gpu_status", "list_clusters", "list_node_groups", "list_tenants", "load_spec",
           "plan_platform", "remove_tenant", "render", "scale_node_group", "to_platform", "validate_cluster",
           "StepResult", "check_cloud", "install_sim_tools", "load_document", "reporting", "status_columns", "top",
           "top_table", "advise", "advice_text", "add_tenant"]


def load_spec(path: Path) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """Read, default and validate a GpuCluster file against the catalog and what its cloud's provider offers;
    every error names its field (exit 2)."""
    from gpuctl.providers import capabilities_of

    return specfile.load_spec(path, capabilities_of)


def load_document(raw: Any, flags: Mapping[str, str] | None = None) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """load_spec of a document already read (a command line's: `flags` maps field paths to the flags)."""
    from gpuctl.providers import capabilities_of

    return specfile.load_document(raw, capabilities_of, flags)


def to_platform(doc: GpuClusterDoc, groups: list[ValidGroup]) -> PlatformSpec:
    """The PlatformSpec of a loaded spec (load_spec), as its cloud's provider builds it."""
    from gpuctl.providers import capabilities_of

    return specfile.to_platform(doc, groups, capabilities_of(doc.cloud).ships_driver)


def plan_platform(spec: PlatformSpec, kubeconfig: Path | None, context: str | None = None) -> list[PlannedStep]:
    """What `apply_platform` would do, step by step; writes nothing (gpuctl.ops.plan). `context`: as
    apply_platform's, the context apply would write, through which the cluster is read (None: the provider's
    name)."""
    from gpuctl.ops.plan import plan_platform as plan

    return plan(spec, kubeconfig, context)


def apply_platform(spec: PlatformSpec, kubeconfig: Path | None, report: Reporter, lock_timeout: float | None = None,
                   context: str | None = None, timeout: float | None = None) -> PlatformResult:
    """Converge the cluster to `spec` (gpuctl.ops.platform.apply_platform). `timeout`: the most seconds any
    one wait for a state (capacity, MIG) may take; without it a wait ends only when its progress stalls
    (gpuctl.util.waiting)."""
    from gpuctl.model.naming import check_duration
    from gpuctl.ops.platform import LOCK_TIMEOUT_S
    from gpuctl.ops.platform import apply_platform as apply
    from gpuctl.util.waiting import wait_limit

    if timeout is not None:
        check_duration(timeout, "--timeout")
    with wait_limit(timeout):
        return apply(spec, kubeconfig, report, lock_timeout=LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout,
                     context=context)


def _provider(cloud: str, options: CloudOptions | None) -> Provider:
    from gpuctl.providers import get_provider

    provider = get_provider(cloud, options)
    provider.check_credentials()
    return provider


def delete_cluster(cloud: str, name: str, kubeconfig: Path | None = None,
                   options: CloudOptions | None = None) -> Change:
    """Delete the cluster and remove from `kubeconfig` (else the default file) what create merged in: every
    context pointing at the cluster entry gpuctl wrote, whatever its name (the provider's, or the --context
    of the create), that entry and its user; no current-context is left naming a removed context (it is
    unset, as eksctl does). Contexts pointing at other clusters are left alone."""
    from gpuctl.kube.kubeconfig import check_kubeconfig, remove_cluster
    from gpuctl.ops.unfinished import forget_unfinished
    from gpuctl.util.output import info

    check_kubeconfig(kubeconfig)
    provider = _provider(cloud, options)
    change = provider.delete_cluster(name)
    forget_unfinished(cloud, name)
    removed = remove_cluster(provider.context_name(name), kubeconfig)
    if removed is not None and removed.contexts:
        info(f"removed context {', '.join(removed.contexts)} from {removed.path}" + (
            "; it was the current context: none is current now (pick one with 'kubectl config use-context NAME' "
            "or gpuctl's --context NAME)" if removed.was_current else ""))
    return change


def list_clusters(cloud: str, options: CloudOptions | None = None) -> list[ClusterInfo]:
    """The provider's clusters; `incomplete` where the last create or apply of one on this machine did not
    finish (gpuctl.ops.unfinished), until a run of it completes."""
    from dataclasses import replace

    from gpuctl.ops.unfinished import unfinished_step

    return [replace(c, status="incomplete") if unfinished_step(cloud, c.name) is not None else c
            for c in _provider(cloud, options).list_clusters()]


def add_node_group(cloud: str, cluster: str, spec: NodeGroupSpec | GroupPlan, options: CloudOptions | None = None,
                   kubeconfig: Path | None = None, context: str | None = None, unstated: frozenset[str] = frozenset(),
                   report: Reporter | None = None) -> Change:
    """Make or converge the node group, then configure it as `apply` would where gpuctl set up the cluster's GPU
    stack (its record, labels, sharing or MIG layout, the stack's settings, the tenants' tolerations), each
    step told to `report`; `unstated`: what the command left unsaid of it (gpuctl.model.spec.UNSTATED), kept as
    recorded for an existing group. Reached through `kubeconfig` and `context` (else the provider's name)."""
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import cluster_side, configure_group, recorded_stack, resolved
    from gpuctl.providers import get_provider
    from gpuctl.util.errors import GpuctlError
    from gpuctl.util.output import info

    check_kubeconfig(kubeconfig)
    plan = spec if isinstance(spec, GroupPlan) else GroupPlan(spec)
    provider = get_provider(cloud, options)
    provider.check_node_group(plan.spec)
    provider.check_credentials()
    try:
        client = _cluster_client(provider, cluster, kubeconfig, context)
    except GpuctlError as exc:  # a cluster not readable yet (no CA): the cloud's node group, unless asked more
        if cluster_side(plan, unstated):
            raise
        info(f"warning: cluster {cluster!r} was not read ({exc.message}); node group {plan.spec.name!r} is made "
             "in the cloud only: rerun 'gpuctl nodegroup add' once the cluster answers, to configure it")
        return provider.ensure_node_group(cluster, plan.spec)
    stack = recorded_stack(client, plan, unstated)  # refused before any write where it cannot be configured
    if stack is None:  # no GPU stack of gpuctl's: the cloud's node group, and the tenants' tolerations
        change = provider.ensure_node_group(cluster, plan.spec)
        _refresh_tolerations(client, plan.spec.name, plan)
        return change
    platform = resolved(client, plan, unstated, stack, cloud, cluster, options or CloudOptions())
    change = provider.ensure_node_group(cluster, platform.groups[0].spec)
    steps = configure_group(provider, platform, client, _helm_target(kubeconfig, context, provider, cluster),
                            report or (lambda _: None))
    configured = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in steps)
    return Change.UPDATED if change is Change.NO_CHANGE and configured else change


def _helm_target(kubeconfig: Path | None, context: str | None, provider: Provider, cluster: str) -> HelmTarget:
    """Helm's way to the cluster, as _cluster_client's: the user's kubeconfig and context (else the provider's
    context name); where that file has no such context, the provider's kubeconfig in a private file removed
    when gpuctl exits."""
    import atexit
    import os
    import tempfile

    import yaml

    from gpuctl.kube.client import api_client
    from gpuctl.stack.helm import HelmTarget as Target
    from gpuctl.util.errors import GpuctlError

    name = context or provider.context_name(cluster)
    try:
        api_client(kubeconfig, name)
        return Target(kubeconfig, name)
    except GpuctlError:
        doc = provider.kubeconfig(cluster)
    handle, path = tempfile.mkstemp(prefix="gpuctl-kubeconfig-", suffix=".yaml")  # mode 0600
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(doc, out)
    return Target(Path(path), doc["current-context"])


def scale_node_group(cloud: str, cluster: str, name: str, nodes: int | None, options: CloudOptions | None = None,
                     kubeconfig: Path | None = None, context: str | None = None, min_nodes: int | None = None,
                     max_nodes: int | None = None) -> Change:
    """Scale the node group (0 nodes included, where the cloud takes it), or set its bounds; a Karpenter group's
    NodePool limit (gpuctl.ops.nodegroups.scale_group). Then give its nodes the group's recorded
    configuration (new nodes join without the sharing or MIG layout gpuctl set on their siblings), through
    `kubeconfig` and `context` (else the provider's context name)."""
    from functools import cache

    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import scale_group
    from gpuctl.ops.platform import configure_recorded_group

    check_kubeconfig(kubeconfig)
    provider = _provider(cloud, options)
    client = cache(lambda: _cluster_client(provider, cluster, kubeconfig, context))
    change = scale_group(provider, cluster, name, nodes, min_nodes, max_nodes, client)
    configured = configure_recorded_group(client(), provider.node_selector(name), name)
    return Change.UPDATED if change is Change.NO_CHANGE and configured is not Change.NO_CHANGE else change


def delete_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                      kubeconfig: Path | None = None, context: str | None = None) -> Change:
    """Delete the node group and its record on the cluster (its taints and sharing no longer shape the GPU
    stack's settings), reached through `kubeconfig` and `context` where it can be."""
    from functools import cache

    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import delete_group
    from gpuctl.ops.platform import forget_recorded_group
    from gpuctl.util.errors import GpuctlError
    from gpuctl.util.output import info

    check_kubeconfig(kubeconfig)
    provider = _provider(cloud, options)
    client = cache(lambda: _cluster_client(provider, cluster, kubeconfig, context))  # made once, where needed
    change = delete_group(provider, cluster, name, client)
    try:
        forget_recorded_group(client(), name)
    except GpuctlError as e:  # the group is gone either way; a record left behind only widens tolerations
        info(f"warning: node group {name!r} deleted, but its record on the cluster was not removed ({e}); "
             f"rerun 'gpuctl nodegroup delete' once the cluster answers")
        return change
    _refresh_tolerations(client(), name)
    return change


def _refresh_tolerations(client: ApiClient, group: str, added: GroupPlan | None = None) -> None:
    """The tenants' GPU tolerations after node group `group` came (`added`) or went; a warning where that
    failed."""
    from gpuctl.ops.platform import refresh_tolerations
    from gpuctl.util.errors import GpuctlError
    from gpuctl.util.output import info

    try:
        refresh_tolerations(client, added)
    except GpuctlError as e:  # the node group is done either way
        info(f"warning: the tenants' GPU tolerations were not updated for node group {group!r} ({e}); "
             "rerun the command once the cluster answers")


def _cluster_client(provider: Provider, cluster: str, kubeconfig: Path | None, context: str | None) -> ApiClient:
    """The cluster through the user's kubeconfig and context (else the provider's context name); where that
    file holds no such context, through the kubeconfig the provider gives for the cluster."""
    from gpuctl.kube.client import api_client
    from gpuctl.util.errors import GpuctlError

    try:
        return api_client(kubeconfig, context or provider.context_name(cluster))
    except GpuctlError:
        return api_client(config_dict=provider.kubeconfig(cluster))


def get_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                   kubeconfig: Path | None = None, context: str | None = None) -> NodeGroupInfo | None:
    """The node group: its cloud node group, its Karpenter NodePool, or both (gpuctl.ops.nodegroups)."""
    from gpuctl.ops.nodegroups import get_group

    provider = _provider(cloud, options)
    return get_group(provider, cluster, name, lambda: _cluster_client(provider, cluster, kubeconfig, context))


def list_node_groups(cloud: str, cluster: str, options: CloudOptions | None = None, kubeconfig: Path | None = None,
                     context: str | None = None) -> list[NodeGroupInfo]:
    """Every node group of the cluster, Karpenter's included (`scaling` says which: cloud, karpenter or both)."""
    from gpuctl.ops.nodegroups import list_groups

    provider = _provider(cloud, options)
    return list_groups(provider, cluster, lambda: _cluster_client(provider, cluster, kubeconfig, context))


# -- what the CLI's cluster-side commands call: each reaches the cluster through `kubeconfig` and `context`
# (the current context when None), as kubectl does.

def _client(kubeconfig: Path | None, context: str | None) -> ApiClient:
    from gpuctl.kube.client import api_client

    return api_client(kubeconfig, context)


def check_cloud(cloud: str, field: str = "--cloud") -> str:
    """`cloud` in its one spelling (any case) where a provider exists for it, else a UsageError naming `field`
    (with the cloud meant, for a near miss or `aws`)."""
    from gpuctl.providers import check_cloud as check

    return check(cloud, field)


def render(spec: PlatformSpec, out: Path | None, field: str = "--out",
           helm_values: str | None = None) -> list[Path] | str:
    """Every object `apply` writes for `spec`, from apply's own renderers: the manifests as one stream (only
    manifests: `kubectl apply -f -` takes it), or written with the Helm values files under `out`; with
    `helm_values`, that one release's values file instead."""
    from gpuctl.ops.render import render as render_spec

    return render_spec(spec, out, field, helm_values)


def gpu_status(nodegroup: str | None = None, kubeconfig: Path | None = None,
               context: str | None = None) -> list[dict[str, Any]]:
    """One row per GPU node (of `nodegroup`): what it offers, its sharing, MIG state and device plugin."""
    from gpuctl.ops.status import gpu_status as status

    return status(_client(kubeconfig, context), nodegroup)


def status_columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The columns of a status table: DRA's device counts where any row has them, else sharing and allocatable."""
    from gpuctl.ops.status import status_columns as columns

    return columns(rows)


def _metrics_inputs(since: str, prometheus: str | None) -> str:
    """The window of `since` (a Prometheus duration), and `prometheus` judged as a URL, before any request."""
    from gpuctl.kube.prometheus import check_prometheus_url
    from gpuctl.model.promql import parse_window

    window = parse_window(since, "--since")
    if prometheus is not None:
        check_prometheus_url(prometheus, "--prometheus")
    return window


def top(prometheus: str | None = None, since: str = "1h", nodegroup: str | None = None, tenant: str | None = None,
        kubeconfig: Path | None = None, context: str | None = None) -> dict[str, Any]:
    """The GPUs at work, from Prometheus (`prometheus`, else $GPUCTL_PROMETHEUS_URL, else a sim cluster's
    own): per node and GPU (and MIG instance) SM activity, utilisation, memory and pods; per tenant the GPUs
    held against its quota and how busy they were over `since` (gpuctl.ops.top)."""
    from gpuctl.model.naming import check_name
    from gpuctl.model.tenant import check_tenant_name
    from gpuctl.ops.gpu_metrics import prometheus_for
    from gpuctl.ops.top import top as read_top

    window = _metrics_inputs(since, prometheus)
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    if tenant is not None:
        check_tenant_name(tenant, "--tenant")
    client = _client(kubeconfig, context)
    return read_top(client, prometheus_for(client, prometheus), window, nodegroup, tenant)


def top_table(view: dict[str, Any], width: int = 80) -> str:
    """`top`'s view as text at most `width` columns wide."""
    from gpuctl.ops.top import render_table

    return render_table(view, width)


def advise(prometheus: str | None = None, since: str = "1h", kubeconfig: Path | None = None,
           context: str | None = None) -> dict[str, Any]:
    """Concrete changes the window's metrics call for, each with its figures and the command that applies it
    (gpuctl.ops.advise); changes nothing."""
    from gpuctl.kube.kubeconfig import current_context
    from gpuctl.ops.advise import advise as read_advice
    from gpuctl.ops.gpu_metrics import prometheus_for

    window = _metrics_inputs(since, prometheus)
    client = _client(kubeconfig, context)
    return read_advice(client, prometheus_for(client, prometheus), window, context or current_context(kubeconfig))


def advice_text(result: dict[str, Any]) -> str:
    """`advise`'s result as numbered paragraphs ("nothing to advise" when there is none)."""
    from gpuctl.ops.advise import render_text

    return render_text(result)


def validate_cluster(nodegroup: str | None = None, image: str = SMOKE_IMAGE, timeout: float = 120.0,
                     kubeconfig: Path | None = None, context: str | None = None) -> list[Check]:
    """The platform's checks (capacity, node config, one device plugin, the CUDA smoke test)."""
    from gpuctl.ops.validate import validate_cluster as validate

    return validate(_client(kubeconfig, context), nodegroup, image, timeout)


def apply_mig(layout: str, nodegroup: str | None = None, selector: str | None = None, strategy: str | None = None,
              timeout: float = 300.0, report: Reporter | None = None, kubeconfig: Path | None = None,
              context: str | None = None) -> tuple[list[StepResult], dict[str, dict[str, int]]]:
    """Apply a MIG layout to the selected GPU nodes (every input judged before the kubeconfig is read), or,
    with neither `nodegroup` nor `selector`, to the one node group whose GPUs take it; the steps run and each
    node's expected allocatable."""
    from gpuctl.ops.mig_apply import apply_mig as apply
    from gpuctl.ops.mig_apply import check_mig_inputs
    from gpuctl.stack.helm import HelmTarget

    check_mig_inputs(layout, nodegroup, selector, strategy, timeout)
    return apply(_client(kubeconfig, context), HelmTarget(kubeconfig, context), layout, nodegroup, selector,
                 strategy, timeout, report or (lambda _: None))


def ensure_tenant(tenant: Tenant, kubeconfig: Path | None = None, context: str | None = None,
                  warn: Callable[[str], None] | None = None) -> tuple[Change, dict[str, int]]:
    """Create or update the tenant to exactly `tenant`; `warn` hears first of quotas above what the cluster's
    GPU nodes offer (allowed). Returns the change and the quota the cluster now holds."""
    from gpuctl.kube.dra import dra_mode
    from gpuctl.ops.tenancy.tenants import ensure_tenant as ensure
    from gpuctl.ops.tenancy.tenants import over_allocatable, read_quota

    client = _client(kubeconfig, context)
    for warning in over_allocatable(client, tenant, dra_mode(client)):
        if warn is not None:
            warn(warning)
    return ensure(client, tenant), read_quota(client, tenant.name)


def add_tenant(given: Mapping[str, Any], flags: Mapping[str, str], kubeconfig: Path | None = None,
               context: str | None = None, warn: Callable[[str], None] | None = None,
               shrink: bool = False) -> TenantUpdate:
    """`gpuctl tenant add`: create tenant `given["name"]`, or update it keeping every field `given` does not
    name (model.tenant.merged_entry, the one place of that rule; a spec's tenants go through ensure_tenant,
    exactly). `given` is a `spec.tenants[]` entry of the fields named (None: back to the default), `flags`
    maps its fields to the flags for errors. A quota lowered below what the team's pods request now is
    refused (exit 2) unless `shrink`. Every input is judged before the cluster is read."""
    from gpuctl.kube.dra import dra_mode
    from gpuctl.model.tenant import merged_entry, tenant_changes
    from gpuctl.ops.tenancy.tenants import check_shrink, read_tenant

    specfile.load_tenant(merged_entry(None, given), flags)  # the flags alone, before any request
    client = _client(kubeconfig, context)
    before = read_tenant(client, given["name"])
    tenant = specfile.load_tenant(merged_entry(before, given), flags)
    if before is not None and not shrink:
        check_shrink(client, before, tenant, dra_mode(client))
    change, quota = ensure_tenant(tenant, kubeconfig, context, warn)
    return TenantUpdate(change, before, tenant, tuple(tenant_changes(before, tenant)), quota)


def list_tenants(kubeconfig: Path | None = None, context: str | None = None) -> list[dict[str, Any]]:
    from gpuctl.ops.tenancy.tenants import list_tenants as tenants

    return tenants(_client(kubeconfig, context))


def remove_tenant(name: str, kubeconfig: Path | None = None, context: str | None = None,
                  timeout: float | None = 300.0) -> Change:
    """Delete what gpuctl made for tenant `name` (its namespace, or in an adopted one only gpuctl's objects),
    then wait up to `timeout` seconds until its namespace is gone (None: do not wait; exit 7 when it is still
    terminating then). NO_CHANGE where there is no such tenant: nothing to remove."""
    from gpuctl.model.naming import check_duration
    from gpuctl.model.tenant import check_tenant_name
    from gpuctl.ops.tenancy.tenants import remove_tenant as remove
    from gpuctl.ops.tenancy.tenants import wait_namespace_gone

    check_tenant_name(name, "NAME")
    if timeout is not None:
        check_duration(timeout, "--timeout")
    client = _client(kubeconfig, context)
    change = remove(client, name)
    if change is Change.DELETED and timeout is not None:
        wait_namespace_gone(client, name, timeout)
    return change


def install_sim_tools(progress: Callable[[str], None] | None = None) -> tuple[list[InstalledTool], Path]:
    """The pinned tools behind the sim provider, installed into the user cache (and where that is)."""
    from gpuctl.tools.installer import ensure_tools, tools_dir
    from gpuctl.tools.pins import SIM_TOOLS

    return ensure_tools(SIM_TOOLS, progress=progress or (lambda _: None)), tools_dir()
