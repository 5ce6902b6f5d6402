"""Team onboarding on a shared GPU pool: a Namespace, a GPU ResourceQuota and a RoleBinding per team, the
GPU fence of tenant namespaces (fence.py) and their GPU tolerations (tolerations.py), where Kueue runs,
the team's queues (queues.py) and, in DRA mode (dra.py: NVIDIA's DRA driver serves the GPUs), the team's
ResourceClaimTemplates (tenant_claims.py).

In DRA mode the ResourceQuota also counts devices claimed: the API server's quota evaluator for
ResourceClaims (Kubernetes v1.36 pkg/quota/v1/evaluator/core/resource_claims.go, claimEvaluator.Usage)
charges each claim `<device class>.deviceclass.resource.k8s.io/devices` with the devices of every request
of that class (ExactCount: its count; All: 32, the most an allocation holds; firstAvailable: the largest
alternative per class), whoever made the claim (a pod's template, the scheduler for an extended resource,
a user). With DRAExtendedResource (beta, on by default in 1.36, pkg/features/kube_features.go) it also
charges `requests.<extendedResourceName>` of the class, `requests.nvidia.com/gpu` for the chart's
gpu.nvidia.com, less what the owning pod's own requests already count (addExtendedResourceQuota), so one
`requests.nvidia.com/gpu` caps GPUs asked for either way. MIG likewise, per profile: the team's `mig-<profile>`
templates claim from gpuctl's class of the profile, which serves an unmodified pod's `nvidia.com/mig-<profile>`
(model/tenant.py Tenant.hard). The device-plugin keys stay: a pod's
`nvidia.com/gpu` is still counted by the pod evaluator, and nodes outside the driver may still serve them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources
from gpuctl.kube.objects import contains, count
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.model.dra import GPU_CLASS, quota_key, requested_only
from gpuctl.model.tenant import DEFAULT_COHORT, TENANT_LABEL, Tenant, profile_of
from gpuctl.ops.tenancy.default_queue import job_defaulting_registered, wait_default_queue_in_force
from gpuctl.ops.tenancy.fence import ensure_fence, remove_fence, wait_fence_in_force
from gpuctl.ops.tenancy.queues import (
    DEFAULT_QUEUE,
    Queues,
    check_queue_ownership,
    ensure_queues,
    observe_queues,
    queue_settings,
    queue_usage,
    remove_queues,
)
from gpuctl.ops.tenancy.tenant_claims import (
    claim_templates,
    ensure_claim_templates,
    models_of,
    published_devices,
    remove_claim_templates,
    template_profiles,
)
from gpuctl.ops.tenancy.tolerations import cluster_groups, converge_tolerations, remove_tolerations
from gpuctl.stack.dra_classes import ensure_profile_classes
from gpuctl.util.errors import UsageError
from gpuctl.util.output import detail, info
from gpuctl.util.waiting import Look, wait_until

if TYPE_CHECKING:
    from gpuctl.kube.kube import Kube
    from gpuctl.kube.kube_object import KubeObject

QUOTA = "gpuctl-gpu-quota"
RBAC = "rbac.authorization.k8s.io/v1"
BINDING = "gpuctl-tenant"
TENANT_ROLE = "edit"  # the built-in ClusterRole for a team's own namespace
ADOPTED = "gpuctl.dev/adopted"  # annotation on a namespace gpuctl took over and must not delete


def tenant_manifests(tenant: Tenant, dra: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) of the tenant: namespace, quota (with the devices of claims in DRA mode) and, with a
    group, binding."""
    labels = {L.MANAGED_BY: L.MANAGER, TENANT_LABEL: tenant.name}
    # An adopted namespace is the team's, not gpuctl's: it is marked, never labelled as made by gpuctl.
    namespace_meta = {"name": tenant.name, "labels": {TENANT_LABEL: tenant.name},
                      "annotations": {ADOPTED: "true"}} if tenant.adopt else {"name": tenant.name, "labels": labels}
    objects: list[tuple[str, dict[str, Any]]] = [
        ("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": namespace_meta}),
        ("quota", {"apiVersion": "v1", "kind": "ResourceQuota",
                   "metadata": {"name": QUOTA, "namespace": tenant.name, "labels": labels},
                   "spec": {"hard": tenant.hard(dra)}}),
    ]
    if tenant.group:
        objects.append(("binding", {
            "apiVersion": RBAC, "kind": "RoleBinding",
            "metadata": {"name": BINDING, "namespace": tenant.name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": tenant.group}]}))
    return objects


def ownership(namespace: KubeObject, name: str) -> str | None:
    """"created" or "adopted" when the namespace is gpuctl's tenant `name`; None otherwise."""
    labels = namespace.labels
    if labels.get(TENANT_LABEL) != name:
        return None
    if namespace.annotations.get(ADOPTED) == "true":
        return "adopted"
    return "created" if L.managed_by_gpuctl(labels) else None


def check_no_queue_fields(tenant: Tenant, prefix: str) -> None:
    """Borrowing, lending and cohorts are Kueue's: refuse them where Kueue does not run (`prefix` + the
    field: a flag `--borrow` or a path `spec.tenants[0].borrow`), instead of a quota that silently means
    something else."""
    given = [name for name, value in (("borrow", tenant.borrow), ("lend", tenant.lend),
                                      ("cohort", None if tenant.cohort == DEFAULT_COHORT else tenant.cohort))
             if value]
    if given:
        raise UsageError(prefix + given[0], "borrowing, lending and cohorts need Kueue, which is not installed "
                         "on this cluster", "install it (gpuctl cluster create ... --kueue, or spec "
                         f"kueue.enabled: true), or drop {prefix}{given[0]}")


def check_ownership(kube: Kube, tenant: Tenant, adopt_field: str = "--adopt",
                    kueue_coming: bool = False) -> Tenant:
    """Refuse an existing namespace gpuctl did not make (unless adopted), and Kueue's fields where Kueue
    neither runs nor is about to be installed (`kueue_coming`); reads only. Returns the tenant as it must
    be applied: who made its namespace does not change."""
    existing = _read(kube, "namespace", tenant.name)
    owner = ownership(existing, tenant.name) if existing is not None else None
    if existing is not None and owner is None and not tenant.adopt:
        raise UsageError(adopt_field, f"namespace {tenant.name!r} exists and gpuctl did not create it",
                         "choose another tenant name, or adopt it (gpuctl will then never delete it)")
    queues = Queues(kube)
    if queues.installed():
        name_field = adopt_field.removesuffix("adopt") + "name" if adopt_field.startswith("spec.") else "NAME"
        check_queue_ownership(queues, tenant, name_field)
    elif not kueue_coming:
        check_no_queue_fields(tenant, adopt_field.removesuffix("adopt") if adopt_field.startswith("spec.") else "--")
    return replace(tenant, adopt=owner == "adopted") if owner is not None else tenant


def ensure_tenant(kube: Kube, tenant: Tenant, adopt_field: str = "--adopt") -> Change:
    """Observe the three objects; apply (server-side, field manager gpuctl) only those that differ.
    An existing namespace gpuctl did not make is refused before any write, unless the tenant adopts it.
    In DRA mode (detected now) the quota counts claimed devices and the team gets ResourceClaimTemplates."""
    tenant = check_ownership(kube, tenant, adopt_field)
    dra = dra_mode(kube)
    fence = ensure_fence(kube)  # in force before the namespace is a tenant's
    created = updated = new = False
    for kind, body in tenant_manifests(tenant, dra):
        current = _read(kube, kind, tenant.name)
        if current is None:
            created = True
            new = new or kind in ("namespace", "quota")  # not yet a tenant (an adopted namespace exists)
        elif holds(current, body):
            continue
        else:
            updated = True
        kube.apply(body)
    if tenant.group is None and _remove_binding(kube, tenant.name):  # the tenant names no group any more
        updated = True
    if created or updated or fence is not Change.NO_CHANGE:  # a new fence, or a namespace new to it
        waited = wait_fence_in_force(kube, tenant.name)
        detail(f"tenant {tenant.name!r}: GPU fence in force in its namespace (waited {waited:.1f}s)")
    tolerating = converge_tolerations(kube, cluster_groups(kube), tenant.name, new_namespace=created or updated)
    kueue = Queues(kube).installed()
    nodes = gpu_nodes(kube) if dra or kueue else []
    # outside DRA mode gpuctl wants no template: those it made while the cluster was in DRA mode go
    models = models_of(nodes)
    # the classes the MIG templates claim from, where apply has not made them
    classes = ensure_profile_classes(kube, template_profiles(tenant, models)) if dra else Change.NO_CHANGE
    templates = ensure_claim_templates(kube, tenant.name, claim_templates(tenant, models) if dra else [])
    if kueue:
        queued = _ensure_queues(kube, tenant, nodes, dra)
    else:
        queued = Change.NO_CHANGE
        _warn_no_kueue(tenant)
    if new:
        return Change.CREATED
    others = (fence, tolerating, classes, templates, queued)
    return Change.UPDATED if created or updated or any(c is not Change.NO_CHANGE for c in others) else Change.NO_CHANGE


def _ensure_queues(kube: Kube, tenant: Tenant, nodes: list[KubeObject], dra: bool) -> Change:
    """The team's Kueue flavors and queues; then, where Kueue's Job webhook runs, wait until it sends the
    namespace's Jobs to the LocalQueue `default`."""
    queued = ensure_queues(kube, tenant, nodes, dra)
    if job_defaulting_registered(kube):  # Kueue's CRDs alone, without its webhooks: no default to wait for
        waited = wait_default_queue_in_force(kube, tenant.name)
        _report(f"tenant {tenant.name!r}: Jobs without a queue label go to its LocalQueue "
                f"'{DEFAULT_QUEUE}' (waited {waited:.1f}s)")
    return queued


def unqueued_tenants(kube: Kube) -> list[str]:
    """Tenants on the cluster without a ClusterQueue of their name (tenants added before Kueue was
    installed): all of them where Kueue's API is not served yet."""
    names = sorted(ns.name for ns in _tenant_namespaces(kube) if not ns.deleting and ownership(ns, ns.name) is not None)
    queues = Queues(kube)
    if not names or not queues.installed():
        return names
    queued = {q.name for q in queues.list("ClusterQueue")}
    return [name for name in names if name not in queued]


def observe_tenant_queues(kube: Kube, name: str, dra: bool) -> Change:
    """What ensure_tenant_queues would do (read only): CREATED where Kueue's API is not served yet."""
    tenant = read_tenant(kube, name)
    if tenant is None:
        return Change.NO_CHANGE
    if not Queues(kube).installed():
        return Change.CREATED
    return observe_queues(kube, tenant, gpu_nodes(kube), dra)


def ensure_tenant_queues(kube: Kube, name: str, dra: bool) -> Change:
    """Give tenant `name`, added before Kueue was installed, its Kueue queues with the quota it holds now
    (read_tenant); its namespace, quota and binding are left as they are."""
    tenant = read_tenant(kube, name)
    if tenant is None:  # removed since the plan was made
        return Change.NO_CHANGE
    check_queue_ownership(Queues(kube), tenant, "NAME")
    return _ensure_queues(kube, tenant, gpu_nodes(kube), dra)


def _remove_binding(kube: Kube, name: str) -> bool:
    """Delete gpuctl's RoleBinding in tenant `name`'s namespace, if there is one."""
    binding = _read(kube, "binding", name)
    if binding is None or not L.managed_by_gpuctl(binding.labels):
        return False
    return kube.delete(RBAC, "RoleBinding", BINDING, name)


def _report(line: str) -> None:
    info(line)


def _warn_no_kueue(tenant: Tenant) -> None:
    """A tenant without queues is what a cluster without Kueue promises: said with -v only, unless the tenant
    names a cohort or lending of its own (what only Kueue keeps)."""
    asked = tenant.cohort != DEFAULT_COHORT or tenant.lend is not None or tenant.borrow
    (_report if asked else detail)(f"{'warning: ' if asked else ''}Kueue is not installed here: tenant "
                                   f"{tenant.name!r} gets its ResourceQuota but no queue (no borrowing or lending)")


# Where each of a tenant's objects is (tenant_manifests' kinds): apiVersion, kind, and its name (None: the tenant's).
_OBJECTS = {"namespace": ("v1", "Namespace", None), "quota": ("v1", "ResourceQuota", QUOTA),
            "binding": (RBAC, "RoleBinding", BINDING)}


def _read(kube: Kube, kind: str, name: str) -> KubeObject | None:
    """The `kind` ("namespace", "quota", "binding") of tenant `name` as the cluster holds it, or None."""
    api_version, kube_kind, object_name = _OBJECTS[kind]
    if object_name is None:
        return kube.get_or_none(api_version, kube_kind, name)
    return kube.get_or_none(api_version, kube_kind, object_name, name)


def _tenant_namespaces(kube: Kube) -> list[KubeObject]:
    """The namespaces labelled as a tenant's, in one LIST (gpuctl's or adopted: ownership tells; some may be
    terminating)."""
    return kube.list("v1", "Namespace", labels=TENANT_LABEL, what="listing tenants")


def holds(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A tenant object on the cluster is as gpuctl wants it: every wanted field, and a quota's `hard` exactly
    (a quota key the tenant no longer has, such as a dropped --mig profile, must go)."""
    if wanted["kind"] == "ResourceQuota" and (current.get("spec") or {}).get("hard") != wanted["spec"]["hard"]:
        return False
    return contains(current, wanted)


def granted(hard: dict[str, Any], used: dict[str, Any] | None = None) -> dict[str, Any]:
    """A quota as commands show it: without the resources it refuses (0: every MIG profile the team is not
    given, Tenant.hard), unless something uses them."""
    return {k: v for k, v in sorted(hard.items()) if count(v) > 0 or count((used or {}).get(k, 0)) > 0}


def read_quota(kube: Kube, name: str) -> dict[str, int]:
    """The GPU quota tenant `name` holds on the cluster now (granted; {} without one), by resource name as
    `tenant list` shows it (nvidia.com/gpu: 2, not requests.nvidia.com/gpu: "2")."""
    quota = _read(kube, "quota", name)
    hard = granted(quota.spec.get("hard") or {}) if quota is not None else {}
    return {k.removeprefix("requests."): count(v) for k, v in sorted(hard.items())}


def read_tenant(kube: Kube, name: str) -> Tenant | None:
    """Tenant `name` as the cluster holds it now, in `tenant add`'s fields: its quota (the ResourceQuota's, less
    what it may borrow), group (RoleBinding), borrow, lend and cohort (ClusterQueue, where Kueue runs); None
    where the cluster has no such tenant (or its namespace is terminating)."""
    ns = _read(kube, "namespace", name)
    owner = ownership(ns, name) if ns is not None else None
    quota = _read(kube, "quota", name) if owner else None
    if ns is None or owner is None or quota is None or ns.deleting:
        return None
    binding = _read(kube, "binding", name)
    groups = [s["name"] for s in binding.get("subjects") or [] if s.get("kind") == "Group"] if binding else []
    queues = Queues(kube)
    borrow, lend, cohort = queue_settings(queues.get("ClusterQueue", name) if queues.installed() else None)
    hard = {k.removeprefix("requests."): count(v) for k, v in (quota.spec.get("hard") or {}).items()}
    mig = {profile: n - borrow for key, n in hard.items()
           if (profile := profile_of(key)) is not None and n - borrow > 0}
    return Tenant(name, max(hard.get(L.GPU_RESOURCE, 0) - borrow, 0), mig, groups[0] if groups else None,
                  owner == "adopted", borrow, lend, cohort or DEFAULT_COHORT)


def tenants_off_mode(kube: Kube, dra: bool) -> list[Tenant]:
    """The tenants whose quota counts claimed devices (Tenant.hard) where `dra` says the cluster will serve no
    device by claim, or the other way round: teams added with `tenant add` before the cluster moved into or out
    of DRA mode. As the cluster holds them (read_tenant), by name; one LIST of gpuctl's quotas."""
    quotas = kube.list("v1", "ResourceQuota", fields=f"metadata.name={QUOTA}", what="listing the tenants' quotas")
    off = sorted(q.namespace or "" for q in quotas if (quota_key(GPU_CLASS) in (q.spec.get("hard") or {})) != dra)
    return [tenant for name in off if (tenant := read_tenant(kube, name)) is not None]


def check_shrink(kube: Kube, before: Tenant, after: Tenant, dra: bool) -> None:
    """Refuse (exit 2) a quota lowered below what the team's pods request now (its ResourceQuota's
    status.used), naming the resource, the use and the fix; the API server would take it, and leave the
    team over its quota."""
    quota = _read(kube, "quota", after.name)
    used = (quota.status.get("used") or {}) if quota is not None else {}
    old = before.hard(dra)
    for key, value in after.hard(dra).items():
        now, limit, was = count(used.get(key, 0)), int(value), count(old.get(key, 0))
        if limit < now and limit < was:
            resource = key.removeprefix("requests.")
            flag = "--mig" if "mig" in resource else "--gpus"
            if limit - after.borrow >= was - before.borrow:  # its nominal quota stays: less to borrow
                flag = "--borrow"
            raise UsageError(flag, f"the quota on {resource} would be {limit}, below the {now} the team's pods "
                             "request now", "stop some of its pods first, or pass --yes to lower it anyway "
                             "(running pods keep running; new ones are refused until use is under the quota)")


def list_tenants(kube: Kube) -> list[dict[str, Any]]:
    """Each tenant's quota against what its pods request now: a LIST per kind (namespaces, gpuctl's quotas and
    bindings in every namespace, ClusterQueues), however many tenants there are."""
    queues = Queues(kube)
    kueue = queues.installed()
    namespaces = _tenant_namespaces(kube)
    by_name = f"metadata.name={QUOTA}"
    quotas = {q.namespace: q for q in kube.list("v1", "ResourceQuota", fields=by_name, what="listing tenants")}
    bindings = {rb.namespace: rb for rb in kube.list(RBAC, "RoleBinding", fields=f"metadata.name={BINDING}",
                                                     what="listing tenants")}
    cluster_queues = {q.name: q for q in queues.list("ClusterQueue")} if kueue and namespaces else {}
    rows = []
    for ns in namespaces:
        quota = quotas.get(ns.name)
        used = (quota.status.get("used") or {}) if quota is not None else {}
        hard = granted((quota.status.get("hard") or quota.spec.get("hard") or {}) if quota is not None else {}, used)
        binding = bindings.get(ns.name)
        subjects = [s["name"] for s in binding.get("subjects") or []] if binding is not None else []
        row: dict[str, Any] = {
            "tenant": ns.name,
            "group": ",".join(subjects) or None,
            "quota": {k.removeprefix("requests."): count(v) for k, v in sorted(hard.items())},
            "used": {k.removeprefix("requests."): count(used.get(k, 0)) for k in sorted(hard)},
        }
        queue = cluster_queues.get(ns.name)
        if queue is not None:
            row["cohort"] = queue.spec.get("cohortName")
            row["queue"] = queue_usage(queue)
        rows.append(row)
    unqueued = [r["tenant"] for r in rows if kueue and "queue" not in r]
    if unqueued:  # added before Kueue was installed
        _report(f"hint: Kueue runs here, but tenant(s) {', '.join(unqueued)} have no queue: "
                + "; ".join(f"'gpuctl tenant add {n}'" for n in unqueued)
                + " gives each its queues with its current quota (or 'gpuctl apply -f SPEC' with kueue enabled)")
    return rows


def remove_tenant(kube: Kube, name: str) -> Change:
    """Delete what gpuctl made for tenant `name`: its Kueue queues, its namespace, or in an adopted namespace
    only the quota and binding gpuctl wrote (and its marks on the namespace); with the last tenant, the GPU
    fence and tolerations. NO_CHANGE where there is no such tenant (nothing to remove, as `kubectl delete
    --ignore-not-found`); a namespace already terminating is not deleted again (wait_namespace_gone waits
    for either)."""
    ns = _read(kube, "namespace", name)
    owner = ownership(ns, name) if ns is not None else None
    if ns is None or owner is None:
        return Change.NO_CHANGE
    if Queues(kube).installed():
        remove_queues(kube, name)
    if owner == "adopted":  # (a namespace gpuctl made takes its templates along when it is deleted)

        remove_claim_templates(kube, name)
    if owner == "created":
        if not ns.deleting:
            kube.delete("v1", "Namespace", name)
    else:
        selector = f"{L.MANAGED_BY}={L.MANAGER}"
        for quota in kube.list("v1", "ResourceQuota", name, labels=selector):
            kube.delete("v1", "ResourceQuota", quota.name, name)
        for binding in kube.list(RBAC, "RoleBinding", name, labels=selector):
            kube.delete(RBAC, "RoleBinding", binding.name, name)
        kube.patch("v1", "Namespace", name,
                   {"metadata": {"labels": {TENANT_LABEL: None}, "annotations": {ADOPTED: None}}})
    # a deleted namespace keeps its label while it terminates: it is no tenant any more
    others = [n for n in _tenant_namespaces(kube) if n.name != name and not n.deleting]
    if not others:
        remove_tolerations(kube)
        remove_fence(kube)
    return Change.DELETED


def wait_namespace_gone(kube: Kube, name: str, timeout: float) -> float:
    """Wait until namespace `name`, being deleted, is gone (the namespace controller deletes its content
    first); the seconds waited. WaitTimeout (exit 7) after `timeout`, saying it is still terminating."""
    import time

    started = time.monotonic()

    def look() -> Look:
        ns = _read(kube, "namespace", name)
        if ns is None or not ns.deleting:  # gone, or kept (an adopted namespace)
            return Look(True)
        left = [c["message"] for c in ns.status.get("conditions") or [] if c.get("status") == "True"
                and c.get("message")]
        return Look(False, detail="terminating" + (f": {left[0]}" if left else ""))

    wait_until(f"namespace {name} to be deleted", look,
               f"it is still terminating; see 'kubectl get namespace {name} -o yaml' for what it waits on, and run "
               f"'gpuctl tenant remove {name}' again to wait longer", stall=timeout, timeout=timeout)
    return time.monotonic() - started


def over_allocatable(kube: Kube, tenant: Tenant, dra: bool | None = None) -> list[str]:
    """Quotas above what the cluster's GPU nodes offer in total: allowed, but worth a warning. In DRA mode
    (`dra` None: detect it) the devices the driver's ResourceSlices publish count as well."""
    if dra is None:
        dra = dra_mode(kube)
    totals: dict[str, int] = {}
    for node in gpu_nodes(kube):
        for resource, amount in gpu_resources(node).items():
            totals[resource] = totals.get(resource, 0) + amount
    if dra:
        for resource, amount in published_devices(kube).items():
            totals[resource] = totals.get(resource, 0) + amount
    warnings = []
    # (a claimed-devices key has its resource's figure on both sides: one warning for the twins)
    for resource, value in requested_only({k.removeprefix("requests."): int(v)
                                           for k, v in tenant.hard(dra).items()}).items():
        if value > totals.get(resource, 0):
            warnings.append(f"{resource} quota {value} is above the cluster's allocatable {totals.get(resource, 0)}")
    return warnings
