"""What gpuctl asks Magnum for and how it reads Magnum's answers back (pure functions)."""

from __future__ import annotations

from typing import Any

from gpuctl.model.catalog import GPUS, GpuModel
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.site import openstack_flavor, openstack_labels
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.providers.base import NodeGroupInfo

# Magnum labels are free-form strings handed to the driver; these mark what gpuctl made (only
# that is deleted) and record the GPU when a --flavor override hides it from the flavor name.
MANAGED_LABEL = "gpuctl_managed"
GPU_LABEL = "gpuctl_gpu"
GPUS_PER_NODE_LABEL = "gpuctl_gpus_per_node"
NODE_LABEL = "magnum.openstack.org/nodegroup"  # set on each node by Magnum's Kubernetes drivers
# Magnum's auto-healing, read by its drivers from the cluster's labels at create (docs/clouds.md): the Heat driver
# (k8s_fedora_coreos_v1, in Magnum up to 2026.1) runs the controller named; the Cluster API driver
# (vexxhost/magnum-cluster-api) makes a MachineHealthCheck per node group from auto_healing_enabled (its default
# true) and ignores the controller. magnum-auto-healer, not draino (which only drains), replaces a node through
# Magnum and reports the cluster's health_status (magnum/drivers/common/k8s_monitor.py then stops polling it).
AUTO_HEALING = {"auto_healing_enabled": "true", "auto_healing_controller": "magnum-auto-healer"}
AUTO_HEALING_OFF = {"auto_healing_enabled": "false"}
CREATE_TIMEOUT_MIN = 60  # Magnum's own default

Json = dict[str, Any]


def cluster_body(name: str, template: str, options: CloudOptions) -> Json:
    """POST /v1/clusters: the template's labels plus the site's GPU ones (merge_labels keeps the template's), and
    auto-healing on (off with --no-node-repair), unless the site's labels say otherwise."""
    healing = AUTO_HEALING_OFF if options.no_node_repair else AUTO_HEALING
    body: Json = {"name": name, "cluster_template_id": template,
                  "labels": {**healing, **openstack_labels(), MANAGED_LABEL: "true"}, "merge_labels": True,
                  "create_timeout": CREATE_TIMEOUT_MIN}
    if options.keypair:
        body["keypair"] = options.keypair
    return body


def auto_healing(labels: Json) -> tuple[bool, str]:
    """(on, how) of a cluster's auto-healing, as its labels say; `how` names the controller or why it is off."""
    enabled = str(labels.get("auto_healing_enabled", "")).lower()
    controller = labels.get("auto_healing_controller") or "draino"  # Magnum's documented default
    if enabled == "true":
        return True, f"auto-healing on: auto_healing_enabled=true, controller {controller} (Heat driver) or a " \
                     "MachineHealthCheck per node group (Cluster API driver)"
    if not enabled:
        return False, "auto_healing_enabled unset: on with the Cluster API driver (its default), off with the Heat " \
                      "driver; Magnum takes labels only at create"
    return False, f"auto-healing off: auto_healing_enabled={labels['auto_healing_enabled']}; Magnum takes labels " \
                  "only at create"


def node_attrs(spec: NodeGroupSpec) -> Json:
    """Microversion 1.14: the Kubernetes labels and taints Magnum sets on every node of the group, so
    nodes register tainted (no pod lands on a GPU before gpuctl's taint) and new nodes get them too."""
    return {"node_labels": spec.registration_labels(),
            "node_taints": [{"key": t.key, "value": t.value, "effect": t.effect} if t.value else
                            {"key": t.key, "effect": t.effect} for t in spec.taints]}


def nodegroup_body(spec: NodeGroupSpec, flavor: str, low: int, high: int | None, with_node_attrs: bool) -> Json:
    """POST /v1/clusters/{c}/nodegroups for a GPU node group of `spec`."""
    labels = {**openstack_labels(), MANAGED_LABEL: "true", GPU_LABEL: spec.gpu.name,
              GPUS_PER_NODE_LABEL: str(spec.gpus_per_node)}
    body = {"name": spec.name, "flavor_id": flavor, "node_count": spec.nodes, "min_node_count": low,
            "max_node_count": high, "role": "worker", "labels": labels, "merge_labels": True}
    return {**body, **node_attrs(spec)} if with_node_attrs else body


def bounds_of(ng: Json) -> tuple[int, int | None]:
    """A node group's autoscaler bounds; Magnum reads max_node_count 0 (or null) as "no maximum"."""
    return ng.get("min_node_count") or 0, ng.get("max_node_count") or None


def node_attr_changes(ng: Json, spec: NodeGroupSpec) -> Json:
    """The node_labels / node_taints of an existing node group that differ from `spec` (Magnum >= 1.14)."""
    wanted = node_attrs(spec)
    taint_key = lambda t: (t.get("key"), t.get("value") or "", t.get("effect"))  # noqa: E731
    changes: Json = {}
    if (ng.get("node_labels") or {}) != wanted["node_labels"]:
        changes["node_labels"] = wanted["node_labels"]
    if sorted(map(taint_key, ng.get("node_taints") or [])) != sorted(map(taint_key, wanted["node_taints"])):
        changes["node_taints"] = wanted["node_taints"]
    return changes


def gpu_for_flavor(flavor: str) -> GpuModel | None:
    """The catalog GPU whose flavor (site config, else catalog default) this is."""
    return next((m for m in GPUS.values() if openstack_flavor(m) == flavor), None)


def is_default(ng: Json) -> bool:
    """Magnum's own default-master / default-worker (never gpuctl's to delete)."""
    return bool(ng.get("is_default")) or ng.get("role") == "master"


def is_managed(obj: Json) -> bool:
    return (obj.get("labels") or {}).get(MANAGED_LABEL) == "true"


def nodegroup_info(cluster: str, ng: Json) -> NodeGroupInfo:
    """From Magnum's record alone: its nodes count as ready once the node group's stack is complete."""
    labels = ng.get("labels") or {}
    model = GPUS.get(labels.get(GPU_LABEL, "")) or gpu_for_flavor(ng.get("flavor_id") or "")
    per_node = labels.get(GPUS_PER_NODE_LABEL)
    count = int(ng.get("node_count") or 0)
    low, high = bounds_of(ng)
    return NodeGroupInfo(
        name=ng["name"],
        cluster=cluster,
        gpu=model.name if model else f"none ({ng.get('flavor_id')})",
        nodes=count,
        ready_nodes=count if ng.get("status") in ("CREATE_COMPLETE", "UPDATE_COMPLETE") else 0,
        gpus_per_node=int(per_node) if per_node else (model.default_gpus_per_node if model else 0),
        min_nodes=low,
        max_nodes=high,
    )


def wanted_bounds(spec: NodeGroupSpec) -> tuple[int, int | None]:
    """The spec's autoscaler bounds as Magnum stores them (a maximum of 0 is no maximum)."""
    low, high = spec.bounds()
    return low, high or None


def widened(current: tuple[int, int | None], wanted: tuple[int, int | None]) -> tuple[int, int | None]:
    """Autoscaler bounds covering both: Magnum refuses a resize outside min/max, and a
    min/max update that excludes the current node count, so bounds widen before and narrow after."""
    high = None if current[1] is None or wanted[1] is None else max(current[1], wanted[1])
    return min(current[0], wanted[0]), high
