"""gpuctl's DeviceClasses in DRA mode: one per MIG profile the cluster's GPU models offer (model/dra.py
mig_device_class), so that an unmodified pod asking for `nvidia.com/mig-3g.20gb: 1` is served by the DRA driver
as one asking for `nvidia.com/gpu: 1` is through the chart's gpu.nvidia.com (KEP-5004, DRAExtendedResource).

Per model, not per applied layout: `gpuctl mig apply` changes a group's layout outside `apply`'s steps, and
a class without devices behind it schedules nothing (as the tolerations policy offers every profile of a
group's model, tolerations.py). Classes gpuctl made (managed-by gpuctl and the class-kind label) and no longer
wants are deleted; a class of a wanted name that gpuctl did not make is left alone, with a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import contains, is_managed
from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.change import Change, Observed
from gpuctl.model.dra import API_VERSION, CLASS_KIND_LABEL, MIG_PROFILE_CLASS, mig_device_class, mig_profiles_of
from gpuctl.util.errors import ClusterError
from gpuctl.util.output import info

SELECTOR = f"{L.MANAGED_BY}={L.MANAGER},{CLASS_KIND_LABEL}={MIG_PROFILE_CLASS}"


def wanted_classes(models: Iterable[GpuModel]) -> list[dict[str, Any]]:
    return [mig_device_class(p) for p in mig_profiles_of(models)]


def _diff(kube: Kube, wanted: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], list[str], bool]:
    """(classes to apply, gpuctl's classes to delete, names of others' classes in the way, whether a class to
    apply exists), from one LIST and a GET per wanted class that gpuctl has not made."""
    ours = {c.name: c for c in kube.list(API_VERSION, "DeviceClass", labels=SELECTOR, what="listing DeviceClasses")}
    applies: list[dict[str, Any]] = []
    foreign: list[str] = []
    existed = False
    for cls in wanted:
        name = cls["metadata"]["name"]
        current: KubeObject | None = ours.get(name) or kube.get_or_none(API_VERSION, "DeviceClass", name)
        if current is not None and not is_managed(current):
            foreign.append(name)
        elif current is None or not contains(current, {k: cls[k] for k in ("metadata", "spec")}):
            applies.append(cls)
            existed = existed or current is not None
    names = {c["metadata"]["name"] for c in wanted}
    return applies, sorted(n for n in ours if n not in names), foreign, existed


def observe_mig_classes(kube: Kube, models: Iterable[GpuModel]) -> Observed:
    applies, deletes, _, existed = _diff(kube, wanted_classes(models))
    if not applies and not deletes:
        return Observed(Change.NO_CHANGE)
    names = ", ".join(c["metadata"]["name"] for c in applies)
    parts = [f"apply {names}"] if applies else []
    parts += [f"delete {', '.join(deletes)}"] if deletes else []
    return Observed(Change.UPDATED if deletes or existed else Change.CREATED, "; ".join(parts))


def ensure_mig_classes(kube: Kube, models: Iterable[GpuModel]) -> Change:
    """Make gpuctl's MIG DeviceClasses those of `models`' profiles (server-side apply of what differs, delete of
    gpuctl's unwanted ones), and return once the API server serves each."""
    wanted = wanted_classes(models)
    applies, deletes, foreign, existed = _diff(kube, wanted)
    for name in foreign:
        info(f"warning: DeviceClass {name} is not gpuctl's: left as it is")
    with requesting("writing gpuctl's MIG DeviceClasses"):
        for name in deletes:
            kube.delete(API_VERSION, "DeviceClass", name)
        for cls in applies:
            kube.apply(cls, strict=True)
    missing = [c["metadata"]["name"] for c in applies
               if kube.get_or_none(API_VERSION, "DeviceClass", c["metadata"]["name"]) is None]
    if missing:
        raise ClusterError(f"the API server does not serve DeviceClass {missing[0]} just applied",
                           "rerun; if it persists, check the API server's log")
    if not applies and not deletes:
        return Change.NO_CHANGE
    return Change.UPDATED if deletes or existed else Change.CREATED


def ensure_profile_classes(kube: Kube, profiles: Iterable[str]) -> Change:
    """Make gpuctl's DeviceClass of each of `profiles` where none of that name exists (a tenant's MIG templates
    claim from it: ops/tenancy/tenant_claims.py), on a cluster whose classes `apply` has not made (a driver
    installed before gpuctl, a node of a model the spec does not name yet). Creates only: what differs or is
    unwanted stays `apply`'s (ensure_mig_classes), a class of the name gpuctl did not make is left alone."""
    missing = [mig_device_class(p) for p in sorted(set(profiles))
               if kube.get_or_none(API_VERSION, "DeviceClass", mig_device_class(p)["metadata"]["name"]) is None]
    with requesting("writing gpuctl's MIG DeviceClasses"):
        for cls in missing:
            kube.apply(cls, strict=True)
    return Change.CREATED if missing else Change.NO_CHANGE
