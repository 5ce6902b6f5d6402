"""What gpuctl asks Magnum for and how it reads Magnum's answers back (pure functions)."""

from __future__ import annotations

from typing import Any

from gpuctl.catalog import GPUS, GpuModel
from gpuctl.providers.base import NodeGroupInfo
from gpuctl.providers.options import CloudOptions
from gpuctl.site import openstack_flavor, openstack_labels
from gpuctl.spec import NodeGroupSpec

# Magnum labels are free-form strings handed to the driver; these mark what gpuctl made (only
# that is deleted) and record the GPU when a --flavor override hides it from the flavor name.
MANAGED_LABEL = "gpuctl_managed"
GPU_LABEL = "gpuctl_gpu"
GPUS_PER_NODE_LABEL = "gpuctl_gpus_per_node"
NODE_LABEL = "magnum.openstack.org/nodegroup"  # set on each node by Magnum's Kubernetes drivers
CREATE_TIMEOUT_MIN = 60  # Magnum's own default

Json = dict[str, Any]


def cluster_body(name: str, template: str, options: CloudOptions) -> Json:
    """POST /v1/clusters: the template's labels plus the site's GPU ones (merge_labels keeps the template's)."""
    body: Json = {"name": name, "cluster_template_id": template, "labels": {**openstack_labels(), MANAGED_LABEL: "true"},
                  "merge_labels": True, "create_timeout": CREATE_TIMEOUT_MIN}
    if options.keypair:
        body["keypair"] = options.keypair
    return body


def nodegroup_body(spec: NodeGroupSpec, flavor: str, low: int, high: int | None) -> Json:
    """POST /v1/clusters/{c}/nodegroups for a GPU node group of `spec`."""
    labels = {**openstack_labels(), MANAGED_LABEL: "true", GPU_LABEL: spec.gpu.name,
              GPUS_PER_NODE_LABEL: str(spec.gpus_per_node)}
    return {"name": spec.name, "flavor_id": flavor, "node_count": spec.nodes, "min_node_count": low,
            "max_node_count": high, "role": "worker", "labels": labels, "merge_labels": True}


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
    return NodeGroupInfo(
        name=ng["name"],
        cluster=cluster,
        gpu=model.name if model else f"none ({ng.get('flavor_id')})",
        nodes=count,
        ready_nodes=count if ng.get("status") in ("CREATE_COMPLETE", "UPDATE_COMPLETE") else 0,
        gpus_per_node=int(per_node) if per_node else (model.default_gpus_per_node if model else 0),
    )


def widened(current: tuple[int, int | None], wanted: tuple[int, int | None]) -> tuple[int, int | None]:
    """Autoscaler bounds covering both: Magnum refuses a resize outside min/max, and a
    min/max update that excludes the current node count, so bounds widen before and narrow after."""
    high = None if current[1] is None or wanted[1] is None else max(current[1], wanted[1])
    return min(current[0], wanted[0]), high
