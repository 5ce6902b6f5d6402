"""The Python API of gpuctl; the CLI is a thin layer over these functions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

# Only the model loads with this module: `render` and `--export-spec` stay fast (bench/startup); operations,
# providers and the Kubernetes client load in the functions that use them.
from gpuctl.model import specfile
from gpuctl.model.change import Change
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.naming import MAX_NODES, check_count, check_duration, check_name, check_text
from gpuctl.model.spec import SMOKE_IMAGE, GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.specfile import GpuClusterDoc, ValidGroup, export_spec
from gpuctl.model.target import DEFAULT_TARGET, ClusterTarget, check_context
from gpuctl.model.tenant import Tenant, TenantUpdate, check_tenant_name, merged_entry, tenant_changes
from gpuctl.util.errors import UsageError
from gpuctl.util.output import info, reporting

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from gpuctl.kube.kube import Kube
    from gpuctl.ops.platform.apply import PlatformResult
    from gpuctl.ops.platform.plan import PlannedStep
    from gpuctl.ops.platform.results import Reporter, StepResult
    from gpuctl.ops.smoke import Check
    from gpuctl.providers.base import ClusterInfo, NodeGroupInfo, Provider
    from gpuctl.tools.installer import InstalledTool

# The result types of the API, loaded with the operations that make them.
_TYPES = {"PlannedStep": "gpuctl.ops.platform.plan", "PlatformResult": "gpuctl.ops.platform.apply",
          "StepResult": "gpuctl.ops.platform.results"}


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
           "top_table", "advise", "advice_text", "add_tenant", "ClusterTarget"]


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


def plan_platform(spec: PlatformSpec, target: ClusterTarget | None = None,
                  write_context: str | None = None) -> list[PlannedStep]:
    """What `apply_platform` would do, step by step; writes nothing (gpuctl.ops.platform.plan). The cluster is read as
    apply reads it: through `target`'s context, else the one apply would write (`write_context`, else the
    provider's name) in `target`'s kubeconfig."""
    from gpuctl.ops.platform.plan import plan_platform as plan

    if write_context is not None:
        check_context(write_context)
    return plan(spec, target or DEFAULT_TARGET, write_context)


def apply_platform(spec: PlatformSpec, target: ClusterTarget | None = None, report: Reporter | None = None,
                   lock_timeout: float | None = None, write_context: str | None = None,
                   timeout: float | None = None) -> PlatformResult:
    """Converge the cluster to `spec` (gpuctl.ops.platform.apply.apply_platform), each step told to `report`.
    write-kubeconfig merges the cluster's context, named `write_context` (else the provider's name), into
    `target`'s kubeconfig; the cluster is then read through `target`'s context, else the one written. On an
    existing cluster every write runs under its apply lock, waited for up to `lock_timeout` seconds. `timeout`:
    the most seconds any one wait for a state (capacity, MIG) may take; without it a wait ends only when its
    progress stalls (gpuctl.util.waiting)."""
    from gpuctl.ops.platform.apply import LOCK_TIMEOUT_S
    from gpuctl.ops.platform.apply import apply_platform as apply
    from gpuctl.util.waiting import wait_limit

    if timeout is not None:
        check_duration(timeout, "--timeout")
    with wait_limit(timeout):
        return apply(spec, target or DEFAULT_TARGET, report or (lambda _: None),
                     lock_timeout=LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout,
                     write_context=write_context)


def _provider(cloud: str, options: CloudOptions | None) -> Provider:
    from gpuctl.providers import get_provider

    provider = get_provider(cloud, options)
    provider.check_credentials()
    return provider


def delete_cluster(cloud: str, name: str, target: ClusterTarget | None = None, options: CloudOptions | None = None,
                   confirm: Callable[[], None] | None = None) -> Change:
    """Delete the cluster and remove from `target`'s kubeconfig (else the default file) what create merged in:
    every context pointing at the cluster entry gpuctl wrote, whatever its name (the provider's, or the
    write_context of the create), that entry and its user; no current-context is left naming a removed context
    (it is unset, as eksctl does). Contexts pointing at other clusters are left alone. `confirm` is called
    once every input is judged, before anything is read or changed (it raises to stop)."""
    from gpuctl.kube.kubeconfig import check_kubeconfig, remove_cluster
    from gpuctl.ops.unfinished import forget_unfinished

    kubeconfig = (target or DEFAULT_TARGET).kubeconfig
    cloud = check_cloud(cloud)
    check_name(name, "--name")
    check_kubeconfig(kubeconfig)
    if confirm is not None:
        confirm()
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
    from gpuctl.ops.unfinished import unfinished_step

    return [replace(c, status="incomplete") if unfinished_step(cloud, c.name) is not None else c
            for c in _provider(cloud, options).list_clusters()]


def add_node_group(cloud: str, cluster: str, spec: NodeGroupSpec | GroupPlan, options: CloudOptions | None = None,
                   target: ClusterTarget | None = None, unstated: frozenset[str] = frozenset(),
                   report: Reporter | None = None) -> Change:
    """Make or converge the node group, then configure it as `apply` would where gpuctl set up the cluster's GPU
    stack (its record, labels, sharing or MIG layout, the stack's settings, the tenants' tolerations), each
    step told to `report`; `unstated`: what the command left unsaid of it (gpuctl.model.spec.UNSTATED), kept as
    recorded for an existing group. Reached through `target` (its context, else the provider's name), else the
    provider's kubeconfig (gpuctl.ops.nodegroups.add_node_group)."""
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import add_node_group as add
    from gpuctl.providers import get_provider

    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_kubeconfig(target.kubeconfig)
    plan = spec if isinstance(spec, GroupPlan) else GroupPlan(spec)
    provider = get_provider(cloud, options)
    provider.check_node_group(plan.spec)
    provider.check_credentials()
    return add(provider, cloud, cluster, plan, target, unstated, report or (lambda _: None),
               options or CloudOptions())


def scale_node_group(cloud: str, cluster: str, name: str, nodes: int | None, options: CloudOptions | None = None,
                     target: ClusterTarget | None = None, min_nodes: int | None = None,
                     max_nodes: int | None = None) -> Change:
    """Scale the node group (0 nodes included, where the cloud takes it), or set its bounds; a Karpenter group's
    NodePool limit (gpuctl.ops.nodegroups.scale_group). Then give its nodes the group's recorded
    configuration (new nodes join without the sharing or MIG layout gpuctl set on their siblings), through
    `target` (its context, else the provider's context name)."""
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import scale_node_group as scale

    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_name(name, "--name")
    for value, flag in ((nodes, "--nodes"), (min_nodes, "--min-nodes"), (max_nodes, "--max-nodes")):
        if value is not None:
            check_count(value, flag, minimum=0, maximum=MAX_NODES)
    if nodes is None and min_nodes is None and max_nodes is None:
        raise UsageError("--nodes", "nothing to change", "pass --nodes N (or --min-nodes / --max-nodes)")
    check_kubeconfig(target.kubeconfig)
    return scale(_provider(cloud, options), cluster, name, nodes, min_nodes, max_nodes, target)


def delete_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                      target: ClusterTarget | None = None, confirm: Callable[[], None] | None = None) -> Change:
    """Delete the node group and its record on the cluster (its taints and sharing no longer shape the GPU
    stack's settings), reached through `target` where it can be (gpuctl.ops.nodegroups.delete_node_group).
    `confirm` is called once every input is judged, before anything is changed (it raises to stop)."""
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.ops.nodegroups import delete_node_group as delete

    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_name(name, "--name")
    check_kubeconfig(target.kubeconfig)
    if confirm is not None:
        confirm()
    return delete(_provider(cloud, options), cluster, name, target)


def get_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                   target: ClusterTarget | None = None) -> NodeGroupInfo | None:
    """The node group: its cloud node group, its Karpenter NodePool, or both (gpuctl.ops.nodegroups)."""
    from gpuctl.ops.nodegroups import cluster_client, get_group

    check_name(cluster, "--cluster")
    check_name(name, "--name")
    provider = _provider(cloud, options)
    return get_group(provider, cluster, name, lambda: cluster_client(provider, cluster, target or DEFAULT_TARGET))


def list_node_groups(cloud: str, cluster: str, options: CloudOptions | None = None,
                     target: ClusterTarget | None = None) -> list[NodeGroupInfo]:
    """Every node group of the cluster, Karpenter's included (`scaling` says which: cloud, karpenter or both)."""
    from gpuctl.ops.nodegroups import cluster_client, list_groups

    check_name(cluster, "--cluster")
    provider = _provider(cloud, options)
    return list_groups(provider, cluster, lambda: cluster_client(provider, cluster, target or DEFAULT_TARGET))


# -- what the CLI's cluster-side commands call: each reaches the cluster through `target` (None: the current
# context of the default kubeconfig), as kubectl does.

def _client(target: ClusterTarget | None) -> Kube:
    from gpuctl.kube.kube import Kube

    target = target or DEFAULT_TARGET
    return Kube.connect(target.kubeconfig, target.context)


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


def gpu_status(nodegroup: str | None = None, target: ClusterTarget | None = None) -> list[dict[str, Any]]:
    """One row per GPU node (of `nodegroup`): what it offers, its sharing, MIG state and device plugin."""
    from gpuctl.ops.status import gpu_status as status

    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    return status(_client(target), nodegroup)


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
        target: ClusterTarget | None = None) -> dict[str, Any]:
    """The GPUs at work, from Prometheus (`prometheus`, else $GPUCTL_PROMETHEUS_URL, else a sim cluster's
    own): per node and GPU (and MIG instance) SM activity, utilisation, memory and pods; per tenant the GPUs
    held against its quota and how busy they were over `since` (gpuctl.ops.metrics.top)."""
    from gpuctl.ops.metrics.gpu_metrics import prometheus_for
    from gpuctl.ops.metrics.top import top as read_top

    window = _metrics_inputs(since, prometheus)
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    if tenant is not None:
        check_tenant_name(tenant, "--tenant")
    client = _client(target)
    return read_top(client, prometheus_for(client, prometheus), window, nodegroup, tenant)


def top_table(view: dict[str, Any], width: int = 80) -> str:
    """`top`'s view as text at most `width` columns wide."""
    from gpuctl.ops.metrics.top import render_table

    return render_table(view, width)


def advise(prometheus: str | None = None, since: str = "1h", target: ClusterTarget | None = None) -> dict[str, Any]:
    """Concrete changes the window's metrics call for, each with its figures and the command that applies it
    (gpuctl.ops.metrics.advise); changes nothing."""
    from gpuctl.kube.kubeconfig import current_context
    from gpuctl.ops.metrics.advise import advise as read_advice
    from gpuctl.ops.metrics.gpu_metrics import prometheus_for

    target = target or DEFAULT_TARGET
    window = _metrics_inputs(since, prometheus)
    client = _client(target)
    return read_advice(client, prometheus_for(client, prometheus), window,
                       target.context or current_context(target.kubeconfig))


def advice_text(result: dict[str, Any]) -> str:
    """`advise`'s result as numbered paragraphs ("nothing to advise" when there is none)."""
    from gpuctl.ops.metrics.advise import render_text

    return render_text(result)


def validate_cluster(nodegroup: str | None = None, image: str = SMOKE_IMAGE, timeout: float = 120.0,
                     target: ClusterTarget | None = None) -> list[Check]:
    """The platform's checks (capacity, node config, one device plugin, the CUDA smoke test)."""
    from gpuctl.ops.validate import validate_cluster as validate

    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    check_text(image, "--image")
    check_duration(timeout, "--timeout")
    return validate(_client(target), nodegroup, image, timeout)


def apply_mig(layout: str, nodegroup: str | None = None, selector: str | None = None, strategy: str | None = None,
              timeout: float = 300.0, report: Reporter | None = None,
              target: ClusterTarget | None = None) -> tuple[list[StepResult], dict[str, dict[str, int]]]:
    """Apply a MIG layout to the selected GPU nodes (every input judged before the kubeconfig is read), or,
    with neither `nodegroup` nor `selector`, to the one node group whose GPUs take it; the steps run and each
    node's expected allocatable."""
    from gpuctl.ops.mig_apply import apply_mig as apply
    from gpuctl.ops.mig_apply import check_mig_inputs
    from gpuctl.stack.helm import HelmTarget

    target = target or DEFAULT_TARGET
    check_mig_inputs(layout, nodegroup, selector, strategy, timeout)
    return apply(_client(target), HelmTarget(target.kubeconfig, target.context), layout, nodegroup, selector,
                 strategy, timeout, report or (lambda _: None))


def ensure_tenant(tenant: Tenant, target: ClusterTarget | None = None,
                  warn: Callable[[str], None] | None = None) -> tuple[Change, dict[str, int]]:
    """Create or update the tenant to exactly `tenant`; `warn` hears first of quotas above what the cluster's
    GPU nodes offer (allowed). Returns the change and the quota the cluster now holds."""
    from gpuctl.kube.dra import dra_mode
    from gpuctl.ops.tenancy.tenants import ensure_tenant as ensure
    from gpuctl.ops.tenancy.tenants import over_allocatable, read_quota

    client = _client(target)
    for warning in over_allocatable(client, tenant, dra_mode(client)):
        if warn is not None:
            warn(warning)
    return ensure(client, tenant), read_quota(client, tenant.name)


def add_tenant(given: Mapping[str, Any], flags: Mapping[str, str], target: ClusterTarget | None = None,
               warn: Callable[[str], None] | None = None, shrink: bool = False) -> TenantUpdate:
    """`gpuctl tenant add`: create tenant `given["name"]`, or update it keeping every field `given` does not
    name (model.tenant.merged_entry, the one place of that rule; a spec's tenants go through ensure_tenant,
    exactly). `given` is a `spec.tenants[]` entry of the fields named (None: back to the default), `flags`
    maps its fields to the flags for errors. A quota lowered below what the team's pods request now is
    refused (exit 2) unless `shrink`. Every input is judged before the cluster is read."""
    from gpuctl.kube.dra import dra_mode
    from gpuctl.ops.tenancy.tenants import check_shrink, read_tenant

    specfile.load_tenant(merged_entry(None, given), flags)  # the flags alone, before any request
    client = _client(target)
    before = read_tenant(client, given["name"])
    tenant = specfile.load_tenant(merged_entry(before, given), flags)
    if before is not None and not shrink:
        check_shrink(client, before, tenant, dra_mode(client))
    change, quota = ensure_tenant(tenant, target, warn)
    return TenantUpdate(change, before, tenant, tuple(tenant_changes(before, tenant)), quota)


def list_tenants(target: ClusterTarget | None = None) -> list[dict[str, Any]]:
    from gpuctl.ops.tenancy.tenants import list_tenants as tenants

    return tenants(_client(target))


def remove_tenant(name: str, target: ClusterTarget | None = None, timeout: float | None = 300.0,
                  confirm: Callable[[], None] | None = None) -> Change:
    """Delete what gpuctl made for tenant `name` (its namespace, or in an adopted one only gpuctl's objects),
    then wait up to `timeout` seconds until its namespace is gone (None: do not wait; exit 7 when it is still
    terminating then). NO_CHANGE where there is no such tenant: nothing to remove. `confirm` is called once
    every input is judged, before the cluster is read (it raises to stop)."""
    from gpuctl.ops.tenancy.tenants import remove_tenant as remove
    from gpuctl.ops.tenancy.tenants import wait_namespace_gone

    check_tenant_name(name, "NAME")
    if timeout is not None:
        check_duration(timeout, "--timeout")
    if confirm is not None:
        confirm()
    client = _client(target)
    change = remove(client, name)
    if change is Change.DELETED and timeout is not None:
        wait_namespace_gone(client, name, timeout)
    return change


def install_sim_tools(progress: Callable[[str], None] | None = None) -> tuple[list[InstalledTool], Path]:
    """The pinned tools behind the sim provider, installed into the user cache (and where that is)."""
    from gpuctl.tools.installer import ensure_tools, tools_dir
    from gpuctl.tools.pins import SIM_TOOLS

    return ensure_tools(SIM_TOOLS, progress=progress or (lambda _: None)), tools_dir()
