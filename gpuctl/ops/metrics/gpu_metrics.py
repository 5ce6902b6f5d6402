"""What `gpuctl top` and `gpuctl advise` read: the GPU series in Prometheus (gpuctl.model.promql), per device
and per tenant, joined with what the cluster says (nodes and their node groups, tenants and their quotas, the
pods and what they request).

Which Prometheus: `--prometheus URL`, else GPUCTL_PROMETHEUS_URL, else, on a cluster whose provider runs
monitoring itself (the sim), the provider's (Provider.prometheus_url).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpuctl.kube.dra import list_claims, list_slices
from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.gpu_nodes import gpu_nodes, model_of, nodegroup_in, unhealthy_devices, unhealthy_gpus
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import count
from gpuctl.kube.prometheus import URL_ENV, Prometheus, Sample, check_prometheus_url
from gpuctl.model import labels as L
from gpuctl.model import promql
from gpuctl.model.catalog import GpuModel
from gpuctl.model.dra import DRIVER, device_type, slice_devices
from gpuctl.model.mig import resource_name
from gpuctl.model.tenant import TENANT_LABEL
from gpuctl.ops.group_records import read_recorded_groups
from gpuctl.ops.tenancy.queues import Queues
from gpuctl.ops.tenancy.tenants import BINDING, QUOTA, granted
from gpuctl.providers import PROVIDERS, capabilities_of, get_provider
from gpuctl.providers.base import RunsMonitoring
from gpuctl.util.errors import UsageError
from gpuctl.util.words import noun

if TYPE_CHECKING:
    from gpuctl.model.spec import GroupPlan

GPU = L.GPU_RESOURCE
MIG_PREFIX = "nvidia.com/mig-"
DONE = ("Succeeded", "Failed")


def prometheus_for(kube: Kube, url: str | None) -> Prometheus:
    """The Prometheus to read: `url` (--prometheus), else $GPUCTL_PROMETHEUS_URL, else the one the cluster's
    provider runs (a sim cluster, recognised by its API server's URL); else a UsageError saying how to give one."""
    if url is not None:
        return Prometheus(check_prometheus_url(url, "--prometheus"), "--prometheus")
    if env := os.environ.get(URL_ENV, "").strip():
        return Prometheus(check_prometheus_url(env, URL_ENV), URL_ENV)
    served = provider_prometheus(kube.server)
    if served is not None:
        return Prometheus(check_prometheus_url(served, "the sim's Prometheus"), "the sim's Prometheus")
    raise UsageError("--prometheus", "no Prometheus to read GPU metrics from",
                     f"pass --prometheus URL or set {URL_ENV}, e.g. after "
                     "'kubectl port-forward -n monitoring svc/prometheus 9090': http://127.0.0.1:9090")


def provider_prometheus(server: str) -> str | None:
    """The base URL of the Prometheus a provider runs beside the cluster served at `server` (providers whose
    capabilities say `monitoring`: the sim), started if it is not running; None for any other cluster."""
    for cloud in PROVIDERS:
        if not capabilities_of(cloud).monitoring:
            continue
        provider = get_provider(cloud)
        for cluster in provider.list_clusters():
            if cluster.endpoint and cluster.endpoint.rstrip("/") == server.rstrip("/"):
                from typing import cast

                return cast("RunsMonitoring", provider).prometheus_url(cluster.name)
    return None


def cluster_of(server: str) -> tuple[str, str] | None:
    """(cloud, cluster) of a cluster a monitoring provider runs at `server` (the sim's), else None."""
    for cloud in PROVIDERS:
        if capabilities_of(cloud).monitoring:
            for cluster in get_provider(cloud).list_clusters():
                if cluster.endpoint and cluster.endpoint.rstrip("/") == server.rstrip("/"):
                    return cloud, cluster.name
    return None


# -- devices -------------------------------------------------------------------------------------------

@dataclass
class Device:
    """One GPU or MIG instance as dcgm-exporter reports it, with its figures (None: no series)."""

    node: str
    gpu: str  # index on the node
    uuid: str
    model: str  # NVML's name, e.g. "Tesla T4"
    mig_profile: str | None
    mig_id: str | None
    values: dict[str, float | None] = field(default_factory=dict)
    pods: set[tuple[str, str]] = field(default_factory=set)  # (namespace, pod) now
    pods_window: set[tuple[str, str]] = field(default_factory=set)  # every pod seen in the window

    @property
    def name(self) -> str:
        """`0`, or `0/3g.20gb#1` for a MIG instance: the GPU index and the instance's profile and id."""
        return self.gpu if self.mig_profile is None else f"{self.gpu}/{self.mig_profile}#{self.mig_id}"

    @property
    def resource(self) -> str:
        """The extended resource a pod asks for to get this device."""
        return GPU if self.mig_profile is None else resource_name(self.mig_profile)


def device_key(labels: dict[str, str]) -> tuple[str, str, str, str]:
    node = next((labels[k] for k in promql.NODE_LABELS if labels.get(k)), "")
    return node, labels.get("gpu", ""), labels.get("UUID", ""), labels.get("GPU_I_ID", "")


def _value(sample: Sample) -> float | None:
    return None if math.isnan(sample.value) else sample.value


def read_devices(answers: dict[str, list[Sample]]) -> dict[tuple[str, str, str, str], Device]:
    """Every device the series show, its figures now and over the window, and the pods on it (from the answers to
    queries())."""
    devices: dict[tuple[str, str, str, str], Device] = {}

    def device(labels: dict[str, str]) -> Device:
        key = device_key(labels)
        if key not in devices:
            devices[key] = Device(key[0], key[1], key[2], labels.get("modelName", ""),
                                  labels.get("GPU_I_PROFILE") or None, labels.get("GPU_I_ID") or None)
        return devices[key]

    for name in {**promql.DEVICE_NOW, **promql.DEVICE_WINDOW}:
        for sample in answers[name]:
            if device_key(sample.labels)[0]:
                device(sample.labels).values[name] = _value(sample)
    for attr in ("pods", "pods_window"):
        for sample in answers[attr]:
            if device_key(sample.labels)[0] and sample.labels.get("pod") and sample.labels.get("namespace"):
                getattr(device(sample.labels), attr).add((sample.labels["namespace"], sample.labels["pod"]))
    return devices


def read_tenant_series(answers: dict[str, list[Sample]]) -> dict[str, dict[str, Any]]:
    """namespace -> allocated_avg and allocated_peak ({resource: devices}) and busy_avg (GPU-equivalents)."""
    usage: dict[str, dict[str, Any]] = {}
    for name in promql.TENANT_WINDOW:
        for sample in answers[f"tenant/{name}"]:
            namespace = sample.labels.get("namespace")
            if not namespace or math.isnan(sample.value):
                continue
            row = usage.setdefault(namespace, {"allocated_avg": {}, "allocated_peak": {}, "busy_avg": 0.0})
            if name == "busy_avg":
                row[name] = sample.value
            else:
                profile = sample.labels.get("GPU_I_PROFILE") or None
                row[name][GPU if profile is None else resource_name(profile)] = sample.value
    return usage


def read_coverage(answers: dict[str, list[Sample]]) -> float | None:
    """The share of the window's steps with GPU series (promql.coverage); None without any."""
    samples = [s.value for s in answers["coverage"] if not math.isnan(s.value)]
    return samples[0] if samples else None


def queries(where: promql.Where) -> dict[str, str]:
    """Every query `top` and `advise` send, by name."""
    return {**{name: build(where) for name, build in {**promql.DEVICE_NOW, **promql.DEVICE_WINDOW}.items()},
            "pods": promql.pods_now(where), "pods_window": promql.pods_over(where),
            **{f"tenant/{name}": build(where) for name, build in promql.TENANT_WINDOW.items()},
            "coverage": promql.coverage(where)}


@dataclass(frozen=True)
class Metrics:
    """Everything `top` and `advise` read from Prometheus, in one place: the dashboard shows the same."""

    devices: dict[tuple[str, str, str, str], Device]
    usage: dict[str, dict[str, Any]]  # per namespace (read_tenant_series)
    coverage: float | None


def read_metrics(prom: Prometheus, window: str) -> Metrics:
    answers = prom.query_all(queries(promql.Where(window=window)))
    return Metrics(read_devices(answers), read_tenant_series(answers), read_coverage(answers))


def read_all(kube: Kube, prom: Prometheus, window: str) -> tuple[Metrics, ClusterView]:
    """The metrics and the cluster, read at the same time; Prometheus's error first where both fail (it is what
    is most likely unreachable), at once: the cluster is read by a daemon thread, which an exit does not wait
    for."""
    import threading

    read: dict[str, Any] = {}

    def cluster() -> None:
        try:
            read["view"] = read_cluster(kube)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread, below)
            read["error"] = exc

    reader = threading.Thread(target=cluster, name="read-cluster", daemon=True)
    reader.start()
    metrics = read_metrics(prom, window)
    reader.join()
    if "error" in read:
        raise read["error"]
    return metrics, read["view"]


def coverage_note(metrics: Metrics, window: str) -> str | None:
    """A note where the metrics cover less than 90% of the window, or none of it while GPUs have series now
    (a Prometheus seconds old: the window's figures are still empty)."""
    coverage = metrics.coverage
    if coverage is None and metrics.devices:
        step = promql.window_range(window).partition(":")[2]
        return (f"no GPU series in the {window} window yet (Prometheus started moments ago): its averages and "
                f"peaks follow within {step}")
    if coverage is None or coverage >= 0.9:
        return None
    return (f"GPU series cover {coverage:.0%} of the {window} window (Prometheus started, or stopped scraping, "
            "within it): averages are over the part they cover")


# -- the cluster -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeInfo:
    name: str
    nodegroup: str | None
    model: GpuModel | None
    sharing: str  # none | time-slicing | mps (the device plugin's label)
    replicas: int
    mig_config: str | None
    # devices the device plugin reports unhealthy, by resource (gpuctl.kube.gpu_nodes.unhealthy_gpus)
    unhealthy: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    node: str | None
    phase: str
    requests: dict[str, int]  # nvidia.com/gpu, nvidia.com/mig-*: what the pod asks for
    claims: bool = False  # it has ResourceClaims (GPUs by DRA: none counted in `requests`)

    @property
    def gpu_requests(self) -> dict[str, int]:
        return {k: v for k, v in self.requests.items() if k == GPU or k.startswith(MIG_PREFIX)}


@dataclass(frozen=True)
class TenantInfo:
    name: str
    quota: dict[str, int]  # resource -> the ResourceQuota's hard limit (quota + what Kueue lets it borrow)
    group: str | None
    queue: dict[str, Any] | None  # its Kueue ClusterQueue, where it has one


@dataclass(frozen=True)
class ClaimedDevice:
    """A GPU or MIG device a ResourceClaim holds (DRA), and the pods the claim is reserved for."""

    node: str
    uuid: str  # the GPU's UUID; a MIG device's parent's, as dcgm-exporter's series name it
    mig_profile: str | None
    pods: frozenset[tuple[str, str]]


@dataclass
class ClusterView:
    nodes: dict[str, NodeInfo]
    pods: list[PodInfo]
    tenants: dict[str, TenantInfo]
    claimed: list[ClaimedDevice] = field(default_factory=list)

    @cached_property
    def gpu_pods(self) -> dict[tuple[str, str], PodInfo]:
        return {(p.namespace, p.name): p for p in self.pods if p.gpu_requests or p.claims}

    @cached_property
    def _known(self) -> set[tuple[str, str]]:
        return {(p.namespace, p.name) for p in self.pods}

    def workloads(self, seen: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """The pods of `seen` (series' pod labels) that are workloads: a pod the cluster has that asks for no
        GPU, by request or claim (the exporter itself, named in `pod` where a scrape does not rename it), is
        not. (Called per GPU: the pod indexes are built once.)"""
        return {p for p in seen if p in self.gpu_pods or p not in self._known}


def _pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """A pod's GPU requests (its containers', limits or requests), from the pod as JSON."""
    total: dict[str, int] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in wanted.items():
            if key == GPU or key.startswith(MIG_PREFIX):
                total[key] = total.get(key, 0) + count(value)
    return total


def read_cluster(kube: Kube) -> ClusterView:
    """GPU nodes, pods (with their GPU requests) and tenants, in five LISTs read as JSON."""
    nodes = {}
    for node in gpu_nodes(kube):
        labels = node["metadata"].get("labels") or {}
        name = node["metadata"]["name"]
        nodes[name] = NodeInfo(name, nodegroup_in(labels), model_of(labels),
                               labels.get("nvidia.com/gpu.sharing-strategy", "none"),
                               int(labels.get("nvidia.com/gpu.replicas", "1") or 1), labels.get(L.MIG_CONFIG),
                               unhealthy_gpus(node))
    pods = [PodInfo(p["metadata"]["namespace"], p["metadata"]["name"], p["spec"].get("nodeName"),
                    str((p.get("status") or {}).get("phase")), _pod_requests(p), bool(p["spec"].get("resourceClaims")))
            for p in kube.list("v1", "Pod", what="listing pods")]
    namespaces = kube.list("v1", "Namespace", labels=TENANT_LABEL, what="listing tenants")
    quotas = {q["metadata"]["namespace"]: q for q in kube.list(
        "v1", "ResourceQuota", fields=f"metadata.name={QUOTA}", what="listing tenants' quotas")}
    bindings = {b["metadata"]["namespace"]: b for b in kube.list(
        "rbac.authorization.k8s.io/v1", "RoleBinding", fields=f"metadata.name={BINDING}",
        what="listing tenants' role bindings")} if namespaces else {}
    tenants = {}
    for ns in namespaces:
        name = ns["metadata"]["name"]
        quota = quotas.get(name) or KubeObject()
        hard = quota.status.get("hard") or quota.spec.get("hard") or {}
        subjects = (bindings.get(name) or KubeObject()).get("subjects") or []
        group = next((s.get("name") for s in subjects if s.get("kind") == "Group"), None)
        tenants[name] = TenantInfo(name, {k.removeprefix("requests."): count(v) for k, v in granted(hard).items()
                                          if k.startswith("requests.nvidia.com/")}, group, None)
    return ClusterView(nodes, pods, tenants, read_claimed(kube))


def read_claimed(kube: Kube) -> list[ClaimedDevice]:
    """The GPU driver's devices that ResourceClaims hold for pods: the claims' allocations (pool = node, device
    name) looked up in the driver's ResourceSlices (its uuid, or a MIG device's parentUUID and profile attributes).
    None where the cluster serves no resource.k8s.io/v1. An adminAccess result holds no device and is skipped."""
    try:
        slices, claims = list_slices(kube), list_claims(kube)
    except KubeNotFound:
        return []
    published = {(node, d["name"]): d for node, devices in slice_devices(slices).items() for d in devices}
    found = []
    for claim in claims:
        status = claim.get("status") or {}
        pods = frozenset((claim["metadata"]["namespace"], r["name"]) for r in status.get("reservedFor") or []
                         if r.get("resource") == "pods" and r.get("name"))
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            device = published.get((result.get("pool"), result.get("device")))
            if not pods or result.get("driver") != DRIVER or result.get("adminAccess") or device is None:
                continue
            attributes = device.get("attributes") or {}
            mig = device_type(device) == "mig"
            uuid = (attributes.get("parentUUID" if mig else "uuid") or {}).get("string")
            if uuid:
                found.append(ClaimedDevice(result["pool"], uuid, (attributes.get("profile") or {}).get("string")
                                           if mig else None, pods))
    return found


def attach_claimed(devices: dict[Any, Device], claimed: list[ClaimedDevice]) -> list[str]:
    """Add to each device the pods that hold it through a ResourceClaim: dcgm-exporter names DRA devices' pods
    only with KUBERNETES_ENABLE_DRA, which the GPU Operator's ClusterPolicy does not set. A MIG device is found
    by its GPU and profile; where that GPU has several instances of the profile the series cannot say which one
    it is, and a note says so instead."""
    notes = []
    for claim in claimed:
        matches = [d for d in devices.values() if d.uuid == claim.uuid and d.mig_profile == claim.mig_profile]
        if len(matches) == 1:
            matches[0].pods |= claim.pods
        elif matches:
            pods = ", ".join(f"{ns}/{name}" for ns, name in sorted(claim.pods))
            notes.append(f"{pods} {noun(len(claim.pods), 'holds', 'hold')} a {claim.mig_profile} MIG device of GPU "
                         f"{claim.uuid} on {claim.node} through "
                         f"a ResourceClaim; the GPU has {len(matches)} {claim.mig_profile} instances and the series "
                         "do not say which")
    return notes


@dataclass(frozen=True)
class Health:
    """Which devices the nodes report unhealthy: `devices` (a device's key -> `unhealthy`, or `unknown` where the
    node has unhealthy devices of its resource that no series names), and per node the unhealthy devices no
    series names (`unnamed`: resource -> GPUs or MIG devices)."""

    devices: dict[Any, str]
    unnamed: dict[str, dict[str, int]]

    def of(self, key: Any) -> str:
        return self.devices.get(key, "healthy")


def device_health(devices: dict[Any, Device], view: ClusterView) -> Health:
    """The node's word on its devices (capacity above allocatable: the kubelet's record of what the device plugin
    reports unhealthy) pinned to devices by DCGM's last XID (non-zero): on a node with U unhealthy GPUs of a
    resource, the devices of that resource with an XID are `unhealthy` where at most U have one, else `unknown`
    (more XIDs than failed GPUs: an old one stays in the gauge); where fewer than U have one, the others are
    `unknown`. A GPU shared N ways is N unhealthy replicas: one GPU. An XID on a node that reports nothing
    unhealthy marks nothing: the plugin ignores application XIDs (13, 31, 43, 45, 68, 109)."""
    marks: dict[Any, str] = {}
    unnamed: dict[str, dict[str, int]] = {}
    for node in view.nodes.values():
        for resource, n in node.unhealthy.items():
            units = unhealthy_devices(resource, n, node.replicas, node.mig_config)
            mine = [k for k, d in devices.items() if d.node == node.name and d.resource == resource]
            flagged = [k for k in mine if devices[k].values.get("xid")]
            named = flagged if len(flagged) <= units else []
            marks.update({k: "unhealthy" if named else "unknown" for k in flagged})
            if len(named) < units:
                marks.update({k: "unknown" for k in mine if k not in named})
                unnamed.setdefault(node.name, {})[resource] = units - len(named)
    return Health(marks, unnamed)


def read_queues(kube: Kube, view: ClusterView) -> None:
    """Each tenant's Kueue ClusterQueue (its borrowing and lending limits, cohort), where Kueue runs."""
    from dataclasses import replace

    queues = Queues(kube)
    if not view.tenants or not queues.installed():
        return
    for name, tenant in list(view.tenants.items()):
        queue = queues.get("ClusterQueue", name)
        if queue is not None:
            view.tenants[name] = replace(tenant, queue=queue)


def node_groups(view: ClusterView) -> dict[str, list[NodeInfo]]:
    groups: dict[str, list[NodeInfo]] = {}
    for node in view.nodes.values():
        groups.setdefault(node.nodegroup or "-", []).append(node)
    return groups


def check_nodegroup(view: ClusterView, nodegroup: str | None) -> None:
    if nodegroup is not None and nodegroup not in node_groups(view):
        raise UsageError("--nodegroup", f"no GPU nodes in node group {nodegroup!r}",
                         "see 'gpuctl status' for the node groups")


def check_tenant(view: ClusterView, tenant: str | None) -> None:
    if tenant is not None and tenant not in view.tenants:
        raise UsageError("--tenant", f"no tenant {tenant!r}", "see 'gpuctl tenant list'")


def recorded_groups(kube: Kube) -> dict[str, GroupPlan]:
    """The node groups recorded on the cluster (their sharing and MIG layout as gpuctl set them)."""
    return read_recorded_groups(kube)
