"""The remove-dra-driver step: the old spec's rollback, once no node group asks for DRA any more.

A cluster whose groups moved to DRA one at a time (a group's `dra: true`: dra_groups.py) got gpuctl's DRA driver
release for them. Applying the spec from before the move moves every group back to the device plugin, and then
this step takes away what the move added, so the cluster is as that spec made it: the tenants' ResourceClaimTemplates
gpuctl made (they claim from classes about to go), gpuctl's MIG DeviceClasses, and the driver's release (`helm
uninstall`, waiting until its DeviceClasses and kubelet plugins are gone). In that order: a failure leaves the
release, so the next apply finds the step again. Only where gpuctl's driver serves groups alone (cluster-wide DRA
mode is left only by uninstalling it by hand: stack.dra_driver.check_dra_mode) and after the moves, which have
emptied the driver's nodes. Left as helm leaves them: the release's namespace and the CRDs of its chart.
"""

from __future__ import annotations

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.dra import API_VERSION
from gpuctl.ops.platform.run import Cluster
from gpuctl.ops.tenancy.tenant_claims import remove_claim_templates
from gpuctl.stack.dra_classes import ensure_mig_classes
from gpuctl.stack.dra_driver import NAMESPACE, RELEASE, dra_driver_owner, ours
from gpuctl.stack.helm import HelmTarget, remove_release
from gpuctl.util.errors import ClusterError
from gpuctl.util.words import plural

STEP = "remove-dra-driver"


def removal_steps(cluster: Cluster) -> list[Step]:
    """The step where the spec asks for no DRA and gpuctl's driver serves node groups only; else none."""
    if cluster.spec.stack.dra_driver or not cluster.dra_groups_only:
        return []
    kube, helm = cluster.client, cluster.helm
    return [Step(STEP, lambda: observe_removal(kube), lambda: remove_dra_driver(kube, helm))]


def _template_namespaces(kube: Kube) -> list[str]:
    templates = kube.list(API_VERSION, "ResourceClaimTemplate", labels=f"{L.MANAGED_BY}={L.MANAGER}",
                          what="listing gpuctl's ResourceClaimTemplates")
    return sorted({str(t.namespace) for t in templates})


def observe_removal(kube: Kube) -> Observed:
    if not ours(dra_driver_owner(kube)):
        return Observed(Change.NO_CHANGE, "")
    teams = _template_namespaces(kube)
    detail = f"helm uninstall {RELEASE} -n {NAMESPACE}: no node group asks for DRA any more" + (
        f"; the claim templates gpuctl made for {plural(len(teams), 'team')} go first" if teams else "")
    return Observed(Change.DELETED, detail)


def remove_dra_driver(kube: Kube, helm: HelmTarget) -> Change:
    """Templates, MIG classes, then the release; done once the cluster is out of DRA mode (no gpu.nvidia.com)."""
    if not ours(dra_driver_owner(kube)):
        return Change.NO_CHANGE
    for namespace in _template_namespaces(kube):
        remove_claim_templates(kube, namespace)
    ensure_mig_classes(kube, [])  # gpuctl's classes no model wants: every one
    remove_release(helm, RELEASE, NAMESPACE)
    if dra_mode(kube):
        raise ClusterError(f"helm uninstall {RELEASE} returned, but DeviceClass gpu.nvidia.com is still there",
                           f"see 'helm status {RELEASE} -n {NAMESPACE}' and 'kubectl get deviceclass gpu.nvidia.com'")
    return Change.DELETED
