"""A tenant's ResourceClaimTemplates in DRA mode (gpuctl/kube/dra.py: NVIDIA's DRA driver serves the GPUs).

The team's namespace gets one template per GPU model on the cluster's GPU nodes (`gpu-<model>`, e.g.
`gpu-a100-40gb`: one full GPU of that model, DeviceClass gpu.nvidia.com) and one per MIG profile of its
quota (`mig-<profile>`, e.g. `mig-3g.20gb`, `+me` written `.me`: one MIG device of that profile on any of
those models, from gpuctl's DeviceClass of the profile, `mig-3g.20gb.gpuctl.dev`: stack/dra_classes.py). The
MIG templates claim from the class an unmodified pod's `nvidia.com/mig-<profile>` is served by, so that one
quota key per profile caps both ways together (model/tenant.py Tenant.hard). A pod claims a device by naming a
template in `spec.resourceClaims[].resourceClaimTemplateName`; the resourceclaim controller makes a ResourceClaim of it
per pod, which the namespace's ResourceQuota counts and the scheduler allocates. One device per template:
a pod that wants two lists the template twice.

A template's spec is immutable (Kubernetes v1.36 pkg/apis/resource/validation/validation.go
ValidateResourceClaimTemplateUpdate), so one whose spec gpuctl would change is deleted and made again; the
claims made from it are copies and stay as they are. A template of a wanted name that gpuctl did not make
is the team's: left alone, with a warning. Templates gpuctl made and no longer wants are deleted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.kube.dra import list_slices
from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.gpu_nodes import model_of
from gpuctl.kube.objects import contains, is_managed
from gpuctl.model import labels as L
from gpuctl.model.change import Change
from gpuctl.model.dra import (
    API_VERSION,
    GPU_CLASS,
    MIG_CLASS,
    current_slices,
    device_request,
    device_type,
    gpu_selector,
    mig_class,
    quota_key,
)
from gpuctl.model.mig import resource_name
from gpuctl.model.tenant import TENANT_LABEL
from gpuctl.util.errors import ClusterError
from gpuctl.util.output import info

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpuctl.kube.kube import Kube
    from gpuctl.kube.kube_object import KubeObject
    from gpuctl.model.catalog import GpuModel
    from gpuctl.model.tenant import Tenant


def gpu_template_name(model: GpuModel) -> str:
    return f"gpu-{model.name}"


def mig_template_name(profile: str) -> str:
    """The device plugin's resource name for the profile without `nvidia.com/`: `mig-3g.20gb`, and
    `mig-1g.10gb.me` for 1g.10gb+me (a DNS subdomain has no '+'; gpuctl.model.mig.resource_name)."""
    return resource_name(profile).removeprefix("nvidia.com/")


def models_of(nodes: list[KubeObject]) -> list[GpuModel]:
    """The catalog GPU models of `nodes` (from their labels), by name."""
    found = {m.name: m for n in nodes if (m := model_of(n.labels)) is not None}
    return [found[name] for name in sorted(found)]


def _template(tenant: Tenant, name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": tenant.name,
                         "labels": {L.MANAGED_BY: L.MANAGER, TENANT_LABEL: tenant.name}},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def claim_templates(tenant: Tenant, models: list[GpuModel]) -> list[dict[str, Any]]:
    """The templates the team gets, by name: a GPU of each of `models` (the cluster's, models_of), a MIG device
    of each profile of its quota that one of those models offers, from gpuctl's class of the profile (which
    selects the profile on any model: no selector of the template's own)."""
    templates = [_template(tenant, gpu_template_name(m), device_request("gpu", GPU_CLASS, gpu_selector(m)))
                 for m in models]
    templates += [_template(tenant, mig_template_name(p), device_request("mig", mig_class(p)))
                  for p in template_profiles(tenant, models)]
    return sorted(templates, key=lambda t: t["metadata"]["name"])


def template_profiles(tenant: Tenant, models: list[GpuModel]) -> list[str]:
    """The MIG profiles of the team's quota that one of `models` offers: one template each (a profile no GPU
    here has gets none: over_allocatable warns of the quota)."""
    return [profile for profile in sorted(tenant.mig)
            if any(m.mig and profile in {p.name for p in m.mig.profiles} for m in models)]


def _list(kube: Kube, namespace: str) -> dict[str, KubeObject] | None:
    """Templates of `namespace` by name (as JSON); None where resource.k8s.io/v1 is not served."""
    try:
        found = kube.list(API_VERSION, "ResourceClaimTemplate", namespace,
                          what=f"listing the ResourceClaimTemplates of {namespace}")
    except KubeNotFound:
        return None
    return {t.name: t for t in found}


def ensure_claim_templates(kube: Kube, namespace: str, wanted: list[dict[str, Any]]) -> Change:
    """Make gpuctl's templates in `namespace` exactly `wanted`: one LIST, then a write only per template that is
    missing (create), differs (labels: apply; spec: delete and create) or is gpuctl's and unwanted (delete)."""
    existing = _list(kube, namespace)
    if existing is None:
        if wanted:  # DRA mode, detected by a resource.k8s.io/v1 DeviceClass, was just seen
            raise ClusterError(f"listing the ResourceClaimTemplates of {namespace} failed: resource.k8s.io/v1 "
                               "is not served", "check the cluster's Kubernetes version (DRA is GA since 1.34)")
        return Change.NO_CHANGE
    applies, deletes, theirs = _changes(existing, wanted)
    for name in theirs:
        info(f"warning: ResourceClaimTemplate {namespace}/{name} is not gpuctl's: left as it is")
    for name in deletes:
        kube.delete(API_VERSION, "ResourceClaimTemplate", name, namespace)  # (False: gone already)
    for template in applies:
        kube.apply(template, strict=True)
    if not applies and not deletes:
        return Change.NO_CHANGE
    if not deletes and all(t["metadata"]["name"] not in existing for t in applies):
        return Change.CREATED
    return Change.UPDATED


def claim_templates_differ(kube: Kube, namespace: str, wanted: list[dict[str, Any]]) -> bool:
    """Whether ensure_claim_templates would write (read only, for plan)."""
    existing = _list(kube, namespace)
    if existing is None:
        return bool(wanted)
    applies, deletes, _ = _changes(existing, wanted)
    return bool(applies or deletes)


def _changes(existing: Mapping[str, KubeObject], wanted: list[dict[str, Any]]
             ) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The templates to apply, the names to delete first, and the wanted names taken by templates not gpuctl's."""
    names = {t["metadata"]["name"] for t in wanted}
    applies: list[dict[str, Any]] = []
    theirs: list[str] = []
    deletes = sorted(n for n, t in existing.items() if n not in names and is_managed(t))
    for template in wanted:
        name = template["metadata"]["name"]
        current = existing.get(name)
        if current is not None and not is_managed(current):
            theirs.append(name)
            continue
        if current is not None and contains(current, {k: template[k] for k in ("metadata", "spec")}):
            continue
        if current is not None and not contains(current["spec"], template["spec"]):
            deletes.append(name)  # the spec is immutable
        applies.append(template)
    return applies, deletes, theirs


def remove_claim_templates(kube: Kube, namespace: str) -> None:
    """Delete the templates gpuctl made in `namespace` (an adopted one: the team's own stay)."""
    ensure_claim_templates(kube, namespace, [])


def published_devices(kube: Kube) -> dict[str, int]:
    """What the driver's ResourceSlices offer, in the quota's terms: full GPUs (as `nvidia.com/gpu` and devices
    of gpu.nvidia.com), MIG devices (devices of mig.nvidia.com, and per profile `nvidia.com/mig-<profile>` and
    devices of gpuctl's class of the profile).
    Only the slices the scheduler allocates from count (model/dra.py current_slices), as in `gpuctl status`."""
    return device_totals(d for s in current_slices(list_slices(kube)) for d in s["spec"].get("devices") or [])


def device_totals(devices: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """published_devices' count of `devices` (the driver's, as JSON) in the quota's terms."""
    totals: dict[str, int] = {}

    def add(key: str) -> None:
        totals[key] = totals.get(key, 0) + 1

    for device in devices:
        kind = device_type(device)
        if kind == "gpu":
            add(L.GPU_RESOURCE)
            add(quota_key(GPU_CLASS))
        elif kind == "mig":
            add(quota_key(MIG_CLASS))
            if profile := ((device.get("attributes") or {}).get("profile") or {}).get("string"):
                add(resource_name(profile))
                add(quota_key(mig_class(profile)))
    return totals
