"""DRA on the sim: gpuctl publishes the ResourceSlices NVIDIA's DRA driver v0.4.1 would, the DeviceClasses come
from the driver's real chart (helm template), and the real kube-scheduler allocates the claims.

A cluster of its own: A100 nodes a100-0 (single claims, CEL, extended resource), a100-1 (filled by nine
claims) and a100-2 (MIG), a T4 node t4-0.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api

from tests.support.kube import APPLY_PATCH, MERGE_PATCH, Kube, api_client
from tests.support.model import Change, NodeGroupSpec, config_name, get_gpu, parse_layout
from tests.support.model import labels as L
from tests.support.sim import KwokCluster, SimProvider, dra
from tests.support.tools import KUBERNETES_VERSION, ensure_tools

pytestmark = pytest.mark.integration

NAME = "dratest"
NS = "dra"
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
CHART = UPSTREAM / "dra-driver-nvidia-gpu-v0.4.1" / "dra-driver-nvidia-gpu"
MIG_NODE = "a100-2"
MIG_LAYOUT = "3g.20gb-2x2g.10gb"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
WAIT_S = 30.0


@dataclass(frozen=True)
class DraCluster:
    client: Any  # kubernetes.client.ApiClient
    first_publish: Change
    device_classes: dict[str, dict[str, Any]]

    @property
    def resource(self) -> Any:  # kubernetes.client.ResourceV1Api
        from kubernetes.client import ResourceV1Api

        return ResourceV1Api(self.client)


def render_device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses of the real chart, rendered by the real helm for a v1.36 cluster serving resource.k8s.io/v1."""
    assert CHART.is_dir(), f"upstream chart missing: {CHART}"
    helm = ensure_tools(["helm"])[0].path
    out = subprocess.run([str(helm), "template", "dra", str(CHART), "--namespace", "nvidia-dra-driver-gpu",
                          # the chart refuses resources.gpus.enabled without it (templates/validation.yaml:33-43)
                          "--set", "gpuResourcesEnabledOverride=true",
                          "--kube-version", KUBERNETES_VERSION, "--api-versions", "resource.k8s.io/v1"],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "DeviceClass"]


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str]) -> Iterator[DraCluster]:
    provider = SimProvider()
    started = time.monotonic()
    provider.ensure_cluster(NAME)
    try:
        provider.ensure_node_group(NAME, NodeGroupSpec("a100", get_gpu("a100-40gb"), 3, 8))
        provider.ensure_node_group(NAME, NodeGroupSpec("t4", get_gpu("t4"), 1, 1))
        client = api_client(KwokCluster(NAME).kubeconfig_path)
        v1 = CoreV1Api(client)
        # the MIG manager's answer for a100-2 (the sim's operator is idle without a ClusterPolicy)
        layout = parse_layout(MIG_LAYOUT, get_gpu("a100-40gb"))
        v1.patch_node(MIG_NODE, {"metadata": {"labels": {L.MIG_CONFIG: config_name(layout), L.MIG_STATE: "success"}}},
                      _content_type=MERGE_PATCH)
        v1.create_namespace({"metadata": {"name": NS}})
        first = dra.publish_slices(Kube(client))
        from kubernetes.client import ResourceV1Api

        classes = render_device_classes()
        for dc in classes:
            ResourceV1Api(client).patch_device_class(dc["metadata"]["name"], dc, field_manager="gpuctl", force=True,
                                                     _content_type=APPLY_PATCH)
        print(f"\nsim cluster {NAME!r} with 4 GPU nodes, slices and DeviceClasses in {time.monotonic() - started:.1f}s")
        yield DraCluster(client, first, {dc["metadata"]["name"]: dc for dc in classes})
    finally:
        provider.delete_cluster(NAME)


def slices(c: DraCluster) -> dict[str, dict[str, Any]]:
    """Node name -> its gpu.nvidia.com ResourceSlice (as JSON)."""
    data = json.loads(c.resource.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com",
                                                     _preload_content=False).data)
    by_node: dict[str, dict[str, Any]] = {}
    for item in data["items"]:
        assert item["spec"]["nodeName"] not in by_node, "one slice per node"
        by_node[item["spec"]["nodeName"]] = item
    return by_node


def attr(device: dict[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


def pod(name: str, claim: dict[str, str] | None = None, node: str | None = None,
        limits: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": TOLERATE_GPU,
                            "containers": [{"name": "main", "image": "busybox", "resources": {}}]}
    if claim is not None:  # {"resourceClaimName": ...} or {"resourceClaimTemplateName": ...}
        spec["resourceClaims"] = [{"name": "gpu", **claim}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if limits:
        spec["containers"][0]["resources"]["limits"] = limits
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def claim(name: str, device_class: str, cel: str | None = None, count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if cel is not None:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def scheduled(c: DraCluster, names: list[str], pending: int = 0) -> dict[str, str]:
    """Wait until all but `pending` of the pods are bound and those are Unschedulable; pod -> node."""
    v1 = CoreV1Api(c.client)
    deadline = time.monotonic() + WAIT_S
    while True:
        pods = [v1.read_namespaced_pod(n, NS) for n in names]
        bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
        refused = [p for p in pods if any(cond.type == "PodScheduled" and cond.status == "False"
                                          and cond.reason == "Unschedulable" for cond in p.status.conditions or [])]
        if len(bound) == len(names) - pending and len(refused) == pending:
            return bound
        if time.monotonic() > deadline:
            raise AssertionError(f"after {WAIT_S:.0f}s bound {bound}, unschedulable "
                                 f"{[(p.metadata.name, p.status.conditions) for p in refused]}")
        time.sleep(0.2)


def allocation(c: DraCluster, name: str) -> dict[str, Any] | None:
    data = json.loads(c.resource.read_namespaced_resource_claim(name, NS, _preload_content=False).data)
    return (data.get("status") or {}).get("allocation")


def claim_of_pod(c: DraCluster, pod_name: str) -> str:
    """The ResourceClaim made for a pod: by the resourceclaim controller from its template, or by the
    scheduler for its extended resource."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        status = CoreV1Api(c.client).read_namespaced_pod(pod_name, NS).status
        names = [s.resource_claim_name for s in status.resource_claim_statuses or [] if s.resource_claim_name]
        extended = status.extended_resource_claim_status
        if names or extended:
            return names[0] if names else extended.resource_claim_name
        time.sleep(0.2)
    raise AssertionError(f"pod {pod_name} has no ResourceClaim after {WAIT_S:.0f}s")


def devices_of(c: DraCluster, claim_name: str) -> list[tuple[str, str]]:
    alloc = allocation(c, claim_name)
    assert alloc is not None, f"claim {claim_name} not allocated"
    results = alloc["devices"]["results"]
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    return [(r["pool"], r["device"]) for r in results]


def test_one_slice_per_gpu_node(cluster: DraCluster) -> None:
    assert cluster.first_publish == Change.CREATED
    by_node = slices(cluster)
    assert set(by_node) == {"a100-0", "a100-1", MIG_NODE, "t4-0"}  # none for the CPU node system-0
    for node in ("a100-0", "a100-1"):
        devices = by_node[node]["spec"]["devices"]
        assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
        assert {attr(d, "productName") for d in devices} == {"NVIDIA A100-SXM4-40GB"}
        assert {d["capacity"]["memory"]["value"] for d in devices} == {"40Gi"}
    [t4] = by_node["t4-0"]["spec"]["devices"]
    assert attr(t4, "productName") == "Tesla T4" and attr(t4, "cudaComputeCapability") == "7.5.0"
    mig = by_node[MIG_NODE]["spec"]["devices"]
    assert len(mig) == 24 and {attr(d, "type") for d in mig} == {"mig"}
    for s in by_node.values():  # as the kubelet plugin's ResourceSlice controller writes it
        assert s["spec"]["pool"] == {"name": s["spec"]["nodeName"], "generation": 1, "resourceSliceCount": 1}
        [owner] = s["metadata"]["ownerReferences"]
        assert owner["kind"] == "Node" and owner["name"] == s["spec"]["nodeName"]
        assert owner["uid"] == CoreV1Api(cluster.client).read_node(owner["name"]).metadata.uid
    assert dra.publish_slices(Kube(cluster.client)) == Change.NO_CHANGE  # converged: nothing written


def test_mig_state_changes_the_slice(cluster: DraCluster) -> None:
    v1 = CoreV1Api(cluster.client)
    before = slices(cluster)[MIG_NODE]["metadata"]["resourceVersion"]
    v1.patch_node(MIG_NODE, {"metadata": {"labels": {L.MIG_STATE: "pending"}}}, _content_type=MERGE_PATCH)
    try:
        assert dra.publish_slices(Kube(cluster.client)) == Change.UPDATED
        assert [d["name"] for d in slices(cluster)[MIG_NODE]["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    finally:
        v1.patch_node(MIG_NODE, {"metadata": {"labels": {L.MIG_STATE: "success"}}}, _content_type=MERGE_PATCH)
    assert dra.publish_slices(Kube(cluster.client)) == Change.UPDATED
    after = slices(cluster)[MIG_NODE]
    assert after["metadata"]["resourceVersion"] != before
    assert [d["name"] for d in after["spec"]["devices"][:3]] == [
        "gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2", "gpu-0-mig-3g20gb-9-4"]


def test_slice_leaves_with_the_gpus(cluster: DraCluster) -> None:
    provider, v1 = SimProvider(), CoreV1Api(cluster.client)
    provider.ensure_node_group(NAME, NodeGroupSpec("spare", get_gpu("t4"), 2, 1))
    assert dra.publish_slices(Kube(cluster.client)) == Change.CREATED
    assert {"spare-0", "spare-1"} <= set(slices(cluster))
    # a node that is no GPU node any more: its slice is deleted
    v1.patch_node("spare-1", {"metadata": {"labels": {L.GPU_MODEL: None, L.GPU_PRODUCT: None}}},
                  _content_type=MERGE_PATCH)
    from tests.support.kube import list_nodes_json

    kube = Kube(cluster.client)
    assert dra.publish_slices(kube, list_nodes_json(kube, f"{L.NODEGROUP}=spare")) == Change.DELETED
    assert "spare-1" not in slices(cluster) and "spare-0" in slices(cluster)
    # a deleted node takes its slice along (the garbage collector follows the owner reference)
    provider.delete_node_group(NAME, "spare")
    deadline = time.monotonic() + WAIT_S
    while "spare-0" in slices(cluster):
        assert time.monotonic() < deadline, "the slice of a deleted node stayed"
        time.sleep(0.2)
    assert dra.publish_slices(Kube(cluster.client)) == Change.NO_CHANGE


def test_device_classes_from_the_chart(cluster: DraCluster) -> None:
    gpu, mig = cluster.device_classes["gpu.nvidia.com"], cluster.device_classes["mig.nvidia.com"]
    assert gpu["apiVersion"] == "resource.k8s.io/v1"
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in gpu["spec"]["selectors"][0]["cel"]["expression"]
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in mig["spec"]["selectors"][0]["cel"]["expression"]


def test_claim_from_template_is_allocated_by_the_scheduler(cluster: DraCluster) -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu", "namespace": NS},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                                                            "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    cluster.resource.create_namespaced_resource_claim_template(NS, template)
    CoreV1Api(cluster.client).create_namespaced_pod(NS, pod("single", {"resourceClaimTemplateName": "one-gpu"}, "a100-0"))
    assert scheduled(cluster, ["single"]) == {"single": "a100-0"}
    name = claim_of_pod(cluster, "single")
    [(pool, device)] = devices_of(cluster, name)
    assert pool == "a100-0" and device in {d["name"] for d in slices(cluster)["a100-0"]["spec"]["devices"]}
    data = json.loads(cluster.resource.read_namespaced_resource_claim(name, NS, _preload_content=False).data)
    assert [r["name"] for r in data["status"]["reservedFor"]] == ["single"]


def test_ninth_gpu_claim_on_an_eight_gpu_node_stays_pending(cluster: DraCluster) -> None:
    v1 = CoreV1Api(cluster.client)
    names = [f"fill-{i}" for i in range(9)]
    for n in names:
        cluster.resource.create_namespaced_resource_claim(NS, claim(n, "gpu.nvidia.com"))
        v1.create_namespaced_pod(NS, pod(n, {"resourceClaimName": n}, "a100-1"))
    bound = scheduled(cluster, names, pending=1)
    assert set(bound.values()) == {"a100-1"}
    [left] = set(names) - set(bound)
    assert allocation(cluster, left) is None
    devices = sorted(d for n in bound for _, d in devices_of(cluster, n))
    assert devices == [f"gpu-{i}" for i in range(8)]  # each GPU once
    condition = next(c for c in v1.read_namespaced_pod(left, NS).status.conditions if c.type == "PodScheduled")
    assert "cannot allocate all claims" in condition.message


def test_cel_selector_on_product_name_picks_the_node(cluster: DraCluster) -> None:
    v1 = CoreV1Api(cluster.client)
    product = "device.attributes['gpu.nvidia.com'].productName == '{}'"
    cluster.resource.create_namespaced_resource_claim(NS, claim("t4", "gpu.nvidia.com", product.format("Tesla T4")))
    cluster.resource.create_namespaced_resource_claim(
        NS, claim("h100", "gpu.nvidia.com", product.format("NVIDIA H100 80GB HBM3")))
    cluster.resource.create_namespaced_resource_claim(NS, claim(
        "ampere-pair", "gpu.nvidia.com",
        "device.attributes['gpu.nvidia.com'].architecture == 'Ampere' && "
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('7.5.0'))", count=2))
    for n in ("t4", "h100", "ampere-pair"):
        v1.create_namespaced_pod(NS, pod(f"cel-{n}", {"resourceClaimName": n}))  # no node asked for
    bound = scheduled(cluster, ["cel-t4", "cel-h100", "cel-ampere-pair"], pending=1)
    assert bound["cel-t4"] == "t4-0" and devices_of(cluster, "t4") == [("t4-0", "gpu-0")]
    assert "cel-h100" not in bound and allocation(cluster, "h100") is None  # no such GPU in the cluster
    # two full A100s on one node: a100-1 is full and a100-2's GPUs are MIG devices, so a100-0
    assert bound["cel-ampere-pair"] == "a100-0"
    assert [p for p, _ in devices_of(cluster, "ampere-pair")] == ["a100-0", "a100-0"]


def test_mig_claim_selecting_the_profile(cluster: DraCluster) -> None:
    v1 = CoreV1Api(cluster.client)
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    cluster.resource.create_namespaced_resource_claim(NS, claim("mig-3g", "mig.nvidia.com", profile.format("3g.20gb")))
    cluster.resource.create_namespaced_resource_claim(
        NS, claim("mig-2g", "mig.nvidia.com", profile.format("2g.10gb"), count=2))
    for n in ("mig-3g", "mig-2g"):
        v1.create_namespaced_pod(NS, pod(n, {"resourceClaimName": n}))
    assert scheduled(cluster, ["mig-3g", "mig-2g"]) == {"mig-3g": MIG_NODE, "mig-2g": MIG_NODE}
    [(pool, device)] = devices_of(cluster, "mig-3g")
    assert pool == MIG_NODE and device.startswith("gpu-") and device.endswith("-mig-3g20gb-9-4")
    two = devices_of(cluster, "mig-2g")
    assert len(set(two)) == 2 and all("-mig-2g10gb-14-" in d for _, d in two)
    by_name = {d["name"]: d for d in slices(cluster)[MIG_NODE]["spec"]["devices"]}
    assert attr(by_name[device], "type") == "mig" and attr(by_name[device], "profile") == "3g.20gb"
    assert by_name[device]["capacity"]["memory"]["value"] == "19968Mi"


def test_extended_resource_request_is_served_from_the_slices(cluster: DraCluster) -> None:
    """Kubernetes 1.36 serves `nvidia.com/gpu` limits from DRA (DRAExtendedResource) through the chart's
    gpu.nvidia.com DeviceClass `extendedResourceName`, on a node that advertises no nvidia.com/gpu."""
    v1 = CoreV1Api(cluster.client)
    assert not (v1.read_node("a100-0").status.allocatable or {}).get("nvidia.com/gpu")
    v1.create_namespaced_pod(NS, pod("classic", node="a100-0", limits={"nvidia.com/gpu": "1"}))
    assert scheduled(cluster, ["classic"]) == {"classic": "a100-0"}
    [(pool, device)] = devices_of(cluster, claim_of_pod(cluster, "classic"))
    assert pool == "a100-0" and device.startswith("gpu-")
