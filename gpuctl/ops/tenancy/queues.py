"""Kueue queues of tenants (kueue.x-k8s.io/v1beta2, Kueue v0.19): a ResourceFlavor per GPU model and
sharing mode the cluster's GPU nodes show (from their labels), a ClusterQueue per team in a shared
cohort with its nominal quota and borrowing/lending limits, and two LocalQueues in the team's namespace
feeding it: one of the team's name, and one named `default`. A job is queued without asking: Kueue's Job
webhook gives a Job created without the label kueue.x-k8s.io/queue-name the queue `default` of its namespace
and suspends it until Kueue admits it (Kueue v0.19.2 pkg/controller/jobs/job/job_webhook.go Default,
pkg/controller/jobframework/defaults.go; unconditional since the LocalQueueDefaulting gate went GA);
a job may still name either queue. A `default` LocalQueue gpuctl did not make (an adopted namespace's) is
left as it is, and kept on removal. default_queue.py waits until the webhook applies the default.

Kueue's rules this follows (its ClusterQueue CRD and docs): a resource is covered by one resource group
only; every flavor of a group lists every covered resource; a flavor is in one group only; borrowing
limits need a cohort; a lending limit cannot exceed the nominal quota. The quota is per flavor, so a team
gets its GPU quota on each GPU model; the namespace's ResourceQuota caps the total (nominal + borrow).

In DRA mode (gpuctl.kube.dra: NVIDIA's DRA driver serves the GPUs) a team's GPUs are ResourceClaims, which Kueue
v0.19 charges to the logical resource its Configuration maps their DeviceClass to (`resources.
deviceClassMappings`, stack/kueue.py). gpuctl names them as the API server's ResourceQuota does
(tenants.py): gpu.nvidia.com's as `nvidia.com/gpu`, mig.nvidia.com's as
`mig.nvidia.com.deviceclass.resource.k8s.io/devices`. So one Kueue resource, nvidia.com/gpu, counts a
team's GPUs however a job asks for them (kueue v0.19.2 source):
- a ResourceClaimTemplate of gpu.nvidia.com: the mapped name (pkg/dra/claims.go
  GetResourceRequestsForResourceClaimTemplates);
- `resources.requests` of nvidia.com/gpu: the chart's DeviceClass names it as its extendedResourceName,
  so KueueDRAIntegrationExtendedResource (beta, on by default since v0.19) takes the class's mapped name
  (pkg/dra/extended_resources.go resolveQuotaKey); with another name this would be a second resource;
- `resources.limits` alone: not seen by that path, which looks at requests before limits become requests
  (pkg/cache/queue/manager.go: NeedsDRAReconcile before AdjustResources), so counted as nvidia.com/gpu
  itself; a logical name of its own would leave these jobs, the usual spelling, outside the quota.
The queue covers those two resources on one flavor without node labels (`gpuctl-dra`): Kueue cannot tell
which GPU model a claim's CEL selector picks (it only checks that enough devices match anywhere,
pkg/dra/claims.go validateCELSelectorsAgainstDevices), so with a flavor per model it would inject another
model's node labels; the claim's selector, not the flavor, chooses the model, and the quota is per device
class, as the ResourceQuota's is. A pod or Job asking for `nvidia.com/mig-<profile>` as written is served by
gpuctl's DeviceClass of the profile (model/dra.py mig_device_class), which the team's `mig-<profile>` template
claims from too, and Kueue's Configuration maps that class to the same name (model/dra.py
device_class_mappings): the team's quota of the profile covers both ways together, as in device-plugin mode. The
driver's mig.nvidia.com gets no quota (0), as in the ResourceQuota (model/tenant.py Tenant.hard).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.gpu_nodes import gpu_resources, nodegroup_of
from gpuctl.kube.objects import contains, is_managed
from gpuctl.model import labels as L
from gpuctl.model.catalog import MIG_PROFILES
from gpuctl.model.change import Change
from gpuctl.model.dra import DEVICE_CLASSES, GPU_CLASS, MIG_CLASS, dra_resource
from gpuctl.model.mig import config_name, resource_name
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.taints import Taint, node_taint, tolerations
from gpuctl.stack.karpenter import advertised
from gpuctl.util.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpuctl.kube.kube import Kube
    from gpuctl.kube.kube_object import KubeObject
    from gpuctl.model.spec import GroupPlan
    from gpuctl.model.tenant import Tenant

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_QUEUE = "default"  # Kueue v0.19.2 pkg/controller/constants/constants.go L27, DefaultLocalQueueName
FLAVOR_PREFIX = "gpuctl-"
OURS = {L.MANAGED_BY: L.MANAGER}
DRA_FLAVOR = FLAVOR_PREFIX + "dra"


@dataclass(frozen=True)
class Flavor:
    """GPU nodes alike for Kueue: one model, one sharing mode (device-plugin config, MIG config)."""

    name: str
    node_labels: dict[str, str]
    resources: tuple[str, ...]  # the GPU resources its nodes advertise
    tolerations: tuple[dict[str, str], ...]  # for the taints every node of it carries


def _flavor_name(labels: dict[str, str]) -> str:
    parts = [labels[L.GPU_MODEL], labels.get(CONFIG_LABEL), labels.get(L.MIG_CONFIG)]
    name = "-".join(p for p in parts if p)
    return FLAVOR_PREFIX + re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:200]


@dataclass(frozen=True)
class NodeShape:
    """What a GPU node shows Kueue: its labels, the GPU resources it advertises (non-zero), its taints."""

    labels: dict[str, str]
    resources: frozenset[str]
    taints: frozenset[Taint]


def node_shape(node: KubeObject) -> NodeShape:
    return NodeShape(node.labels, frozenset(gpu_resources(node)),
                     frozenset(node_taint(t) for t in node.spec.get("taints") or []))


def group_shape(plan: GroupPlan, mig_strategy: str) -> NodeShape:
    """How a node of node group `plan` shows once apply has configured it: gpuctl's model label, its device-plugin
    and MIG config labels, what the device plugin advertises, the group's taints."""
    labels = {L.GPU_MODEL: plan.spec.gpu.name}
    if plan.sharing.config_key:
        labels[CONFIG_LABEL] = plan.sharing.config_key
    if plan.mig is not None:
        labels[L.MIG_CONFIG] = config_name(plan.mig)
    resources = frozenset(r for r, n in advertised(plan, mig_strategy).items() if n > 0)
    return NodeShape(labels, resources, frozenset(plan.spec.taints))


def planned_shapes(groups: tuple[GroupPlan, ...], mig_strategy: str, nodes: list[KubeObject]) -> list[NodeShape]:
    """How the GPU `nodes` (gpu_nodes) will show once apply has configured `groups` (for plan: the queues' flavors
    come from the nodes, gpuctl.ops.tenancy.tenants ensure_tenant): a group that has nodes now or asks for some
    as group_shape says, a GPU node of no such group as it is."""
    present, names = {nodegroup_of(n) for n in nodes}, {g.spec.name for g in groups}
    return ([group_shape(g, mig_strategy) for g in groups if g.spec.name in present or g.spec.nodes > 0]
            + [node_shape(n) for n in nodes if nodegroup_of(n) not in names])


def flavors_of(nodes: list[KubeObject]) -> list[Flavor]:
    """One flavor per (GPU model, device-plugin config, MIG config) among GPU nodes with a catalog model."""
    return _flavors([node_shape(n) for n in nodes])


def _flavors(shapes: list[NodeShape]) -> list[Flavor]:
    groups: dict[str, list[NodeShape]] = {}
    for shape in shapes:
        if shape.labels.get(L.GPU_MODEL):
            groups.setdefault(_flavor_name(shape.labels), []).append(shape)
    flavors = []
    for name, members in sorted(groups.items()):
        labels = members[0].labels
        selector = {k: labels[k] for k in (L.GPU_MODEL, CONFIG_LABEL, L.MIG_CONFIG) if labels.get(k)}
        resources = sorted({r for m in members for r in m.resources})
        flavors.append(Flavor(name, selector, tuple(resources), _tolerations(members)))
    return flavors


def _tolerations(shapes: list[NodeShape]) -> tuple[dict[str, str], ...]:
    """Tolerations of the taints every one of `shapes` carries."""
    common = frozenset.intersection(*(s.taints for s in shapes)) if shapes else frozenset()
    return tuple(tolerations(sorted(common)))


def dra_flavor(nodes: list[KubeObject]) -> Flavor:
    """DRA mode's one flavor: the driver's devices on every GPU node, no node labels (a claim's selector picks
    the model), tolerating the taints all GPU nodes carry."""
    return _dra_flavor([node_shape(n) for n in nodes])


def _dra_flavor(shapes: list[NodeShape]) -> Flavor:
    # and each MIG profile's extended resource, served by gpuctl's class of the profile (model/dra.py mig_class)
    resources = (*(dra_resource(c) for c in DEVICE_CLASSES), *(resource_name(p) for p in MIG_PROFILES))
    return Flavor(DRA_FLAVOR, {}, resources, _tolerations(shapes))


def offered_flavors(shapes: list[NodeShape], dra: bool = False) -> list[Flavor]:
    """The flavors of GPU nodes shaped so: DRA mode's one, else one per model and sharing mode."""
    return [_dra_flavor(shapes)] if dra else _flavors(shapes)


def quota_of(tenant: Tenant, dra: bool = False) -> dict[str, int]:
    """The team's nominal quota per GPU resource; in DRA mode per device class (MIG: per profile, the driver's
    mig.nvidia.com none)."""
    if dra:
        return {dra_resource(GPU_CLASS): tenant.gpus, dra_resource(MIG_CLASS): 0,
                **{resource_name(p): n for p, n in sorted(tenant.mig.items())}}
    return {L.GPU_RESOURCE: tenant.gpus, **{resource_name(p): n for p, n in sorted(tenant.mig.items())}}


def flavor_manifest(flavor: Flavor) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": flavor.node_labels} if flavor.node_labels else {}
    if flavor.tolerations:
        spec["tolerations"] = list(flavor.tolerations)
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": flavor.name, "labels": dict(OURS)}, "spec": spec}


def resource_groups(tenant: Tenant, flavors: list[Flavor], dra: bool = False) -> list[dict[str, Any]]:
    """Resources joined by a flavor that offers both form one group (Kueue: a flavor is in one group)."""
    quota = quota_of(tenant, dra)
    offered = [f for f in flavors if set(f.resources) & set(quota)]
    groups: list[tuple[set[str], list[Flavor]]] = []
    for flavor in offered:
        mine = set(flavor.resources) & set(quota)
        joined = [g for g in groups if g[0] & mine]
        for g in joined:
            groups.remove(g)
            mine |= g[0]
        groups.append((mine, [f for g in joined for f in g[1]] + [flavor]))
    out = []
    for covered, members in sorted(groups, key=lambda g: sorted(g[0])):
        order = sorted(covered)
        out.append({"coveredResources": order, "flavors": [
            {"name": f.name, "resources": [_limits(r, quota[r] if r in f.resources else 0, tenant) for r in order]}
            for f in sorted(members, key=lambda f: f.name)]})
    return out


def _limits(resource: str, nominal: int, tenant: Tenant) -> dict[str, Any]:
    """Quantities as strings, as Kueue's manager writes its ClusterQueues back (finalizers): what gpuctl applies is
    then what the cluster keeps, and `kubectl diff` of `gpuctl render` finds nothing."""
    entry: dict[str, Any] = {"name": resource, "nominalQuota": str(nominal), "borrowingLimit": str(tenant.borrow)}
    if tenant.lend is not None:
        entry["lendingLimit"] = str(min(tenant.lend, nominal))
    return entry


def cluster_queue_manifest(tenant: Tenant, flavors: list[Flavor], dra: bool = False) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue",
            "metadata": {"name": tenant.name, "labels": dict(OURS)},
            "spec": {"cohortName": tenant.cohort,
                     # only the team's own namespace may queue here
                     "namespaceSelector": {"matchLabels": {L.NAMESPACE_NAME: tenant.name}},
                     "resourceGroups": resource_groups(tenant, flavors, dra)}}


def local_queue_manifest(tenant: Tenant, name: str | None = None) -> dict[str, Any]:
    """The LocalQueue `name` (default: the team's) in the team's namespace, feeding its ClusterQueue."""
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": name or tenant.name, "namespace": tenant.name, "labels": dict(OURS)},
            "spec": {"clusterQueue": tenant.name}}


def queue_manifests(tenant: Tenant, nodes: list[KubeObject] | list[NodeShape],
                    dra: bool = False) -> list[dict[str, Any]]:
    """Flavors the team's queue uses, its ClusterQueue and LocalQueues (the team's, `default`), in the order
    they must exist: from the cluster's GPU nodes (apply), or from the node shapes of a spec's groups (render)."""
    offered = offered_flavors([n if isinstance(n, NodeShape) else node_shape(n) for n in nodes], dra)
    queue = cluster_queue_manifest(tenant, offered, dra)
    used = {f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}
    return [*(flavor_manifest(f) for f in offered if f.name in used), queue, local_queue_manifest(tenant),
            local_queue_manifest(tenant, DEFAULT_QUEUE)]


def _not_ours_to_change(doc: dict[str, Any], current: dict[str, Any]) -> bool:
    """A flavor or a `default` LocalQueue that exists and that gpuctl did not make: others may rely on it."""
    shared = doc["kind"] == "ResourceFlavor" or (doc["kind"] == "LocalQueue"
                                                 and doc["metadata"]["name"] == DEFAULT_QUEUE)
    return shared and not is_managed(current)


class Queues:
    """Kueue's objects on a cluster, read as plain JSON and written with server-side apply."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def get(self, kind: str, name: str, namespace: str | None = None) -> KubeObject | None:
        """The object; None where it, or Kueue's API, is absent."""
        return self.kube.get_or_none(API_VERSION, kind, name, namespace)

    def apply(self, doc: dict[str, Any]) -> None:
        """Server-side apply; strict: a field Kueue's CRD does not know is an error, not dropped."""
        self.kube.apply(doc, strict=True)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete the object; nothing where it is gone already."""
        self.kube.delete(API_VERSION, kind, name, namespace)

    def installed(self) -> bool:
        """Whether Kueue's API is served here (its CRDs exist): the server's discovery, read once per command
        where it serves it."""
        return self.kube.serves(API_VERSION, "ClusterQueue")

    def list(self, kind: str) -> list[KubeObject]:
        """Every object of `kind` ([] where Kueue's API is not served)."""
        try:
            return self.kube.list(API_VERSION, kind, what=f"listing Kueue {kind}s")
        except KubeNotFound:
            return []


def check_queue_ownership(queues: Queues, tenant: Tenant, field: str) -> None:
    """A ClusterQueue of the team's name that gpuctl did not make is someone else's: refuse, before any write."""
    current = queues.get("ClusterQueue", tenant.name)
    if current is not None and not is_managed(current):
        raise UsageError(field, f"Kueue ClusterQueue {tenant.name!r} exists and gpuctl did not create it",
                         "choose another tenant name, or delete that ClusterQueue")


def ensure_queues(kube: Kube, tenant: Tenant, nodes: list[KubeObject], dra: bool = False) -> Change:
    """Apply the team's flavors and queues where they differ; flavors and a `default` LocalQueue gpuctl did not
    make are left alone."""
    queues = Queues(kube)
    created = updated = False
    for doc, current in _differing(queues, tenant, nodes, dra):
        queues.apply(doc)
        created, updated = created or current is None, updated or current is not None
    return Change.CREATED if created else Change.UPDATED if updated else Change.NO_CHANGE


def observe_queues(kube: Kube, tenant: Tenant, nodes: list[KubeObject] | list[NodeShape], dra: bool = False) -> Change:
    """What ensure_queues would do, read only."""
    differing = list(_differing(Queues(kube), tenant, nodes, dra))
    if any(current is None for _, current in differing):
        return Change.CREATED
    return Change.UPDATED if differing else Change.NO_CHANGE


def _differing(queues: Queues, tenant: Tenant, nodes: list[KubeObject] | list[NodeShape],
               dra: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(wanted, current or None) of each of the team's Kueue objects gpuctl would write, in order."""
    for doc in queue_manifests(tenant, nodes, dra):
        meta = doc["metadata"]
        current = queues.get(doc["kind"], meta["name"], meta.get("namespace"))
        if current is not None and (contains(_quantities(current), _quantities(doc))
                                    or _not_ours_to_change(doc, current)):
            continue
        yield doc, current


def _quantities(doc: Any) -> Any:
    """`doc` with its numbers as strings: gpuctl writes quotas as numbers, Kueue's manager writes its
    ClusterQueues back (finalizers) with them as quantity strings ("4"); both mean the same."""
    if isinstance(doc, dict):
        return {k: _quantities(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_quantities(v) for v in doc]
    return str(doc) if isinstance(doc, int) and not isinstance(doc, bool) else doc


def remove_queues(kube: Kube, name: str) -> None:
    """Delete the team's ClusterQueue and LocalQueues if gpuctl made them, then gpuctl's flavors no queue uses."""
    queues = Queues(kube)
    for local in (name, DEFAULT_QUEUE):
        if is_managed(queues.get("LocalQueue", local, name)):
            queues.delete("LocalQueue", local, name)
    if is_managed(queues.get("ClusterQueue", name)):
        queues.delete("ClusterQueue", name)
    used = {f["name"] for q in queues.list("ClusterQueue") if q.name != name
            for g in q.spec.get("resourceGroups") or [] for f in g["flavors"]}
    for flavor in queues.list("ResourceFlavor"):
        if is_managed(flavor) and flavor.name not in used:
            queues.delete("ResourceFlavor", flavor.name)


def queue_settings(queue: dict[str, Any] | None) -> tuple[int, int | None, str | None]:
    """(borrow, lend, cohort) a team's ClusterQueue was written with (resource_groups' inverse; (0, None,
    None) without one). Lend: every entry's lendingLimit is min(lend, nominal), so one below its nominal
    quota is lend itself; where none is, lend was at least every nominal quota, and their largest
    writes the same queue."""
    if queue is None:
        return 0, None, None
    spec = queue.get("spec") or {}
    entries = [res for group in spec.get("resourceGroups") or [] for flavor in group.get("flavors") or []
               for res in flavor.get("resources") or []]
    borrow = max((whole(res.get("borrowingLimit", 0)) for res in entries), default=0)
    lent = [(whole(res["lendingLimit"]), whole(res.get("nominalQuota", 0))) for res in entries if "lendingLimit" in res]
    below = [limit for limit, nominal in lent if limit < nominal]
    lend = below[0] if below else max((nominal for _, nominal in lent), default=None)
    return borrow, lend, spec.get("cohortName")


def whole(value: Any) -> int:
    """A count Kueue reports as a quantity ("4", 4); GPU resources are whole numbers."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def queue_usage(queue: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """flavor -> resource -> nominal, borrowed and used (admitted) of a ClusterQueue."""
    usage: dict[str, dict[str, dict[str, int]]] = {}
    for group in queue["spec"].get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for res in flavor["resources"]:
                usage.setdefault(flavor["name"], {})[res["name"]] = {
                    "nominal": whole(res["nominalQuota"]), "borrowed": 0, "used": 0}
    for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            row = usage.setdefault(flavor["name"], {}).setdefault(res["name"], {"nominal": 0, "borrowed": 0, "used": 0})
            row["borrowed"], row["used"] = whole(res.get("borrowed", 0)), whole(res.get("total", 0))
    return usage
