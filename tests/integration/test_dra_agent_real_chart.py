"""DRA mode on the sim with the DRA driver's REAL chart (dra-driver-nvidia-gpu v0.4.1, helm-installed
unmodified, without the GPU Operator): its kubelet-plugin DaemonSet lands pods on the kwok GPU nodes, the
sim operator publishes a ResourceSlice for exactly those nodes (and withdraws it when the plugin goes),
the real kube-scheduler allocates the claims, and `gpuctl validate` / `gpuctl status` read DRA mode.

One cluster for the module: a100-0 (filled by nine claims), a100-1 (single claims), mig-0 (one A100 that
gets a MIG layout), t4-0 (validate), st-0 (four T4s, status), spare-0 (no NFD label: no DaemonSet pod,
the test's own plugin pod instead).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes.client import CoreV1Api

from tests.conftest import run_gpuctl
from tests.support.kube import MERGE_PATCH, Kube, api_client
from tests.support.model import (
    PLUGIN_COMPONENT,
    PLUGIN_COMPONENT_LABEL,
    Change,
    NodeGroupSpec,
    config_name,
    get_gpu,
    parse_layout,
)
from tests.support.model import labels as L
from tests.support.sim import KwokCluster, SimProvider, dra
from tests.support.tools import ensure_tools

pytestmark = pytest.mark.integration
NAME = "dra-chart"
NS = "work"
RELEASE = "dra-driver-nvidia-gpu"  # release and namespace, as gpuctl installs it
CHART = Path(__file__).resolve().parents[2].parent / "shared" / "upstream" / "dra-driver-nvidia-gpu-v0.4.1" / \
    "dra-driver-nvidia-gpu"
GPU_NODES = {"a100-0", "a100-1", "mig-0", "t4-0", "st-0"}
MIG_LAYOUT = "3g.20gb-2x2g.10gb"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
CUDA_SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
WAIT_S = 30.0
PLUGIN_IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
T = TypeVar("T")


@dataclass(frozen=True)
class Cluster:
    client: Any  # kubernetes.client.ApiClient
    env: dict[str, str]  # for the gpuctl CLI: KUBECONFIG is the sim cluster's
    helm: list[str]  # helm ... --kubeconfig FILE
    setup_s: float

    @property
    def v1(self) -> Any:
        return CoreV1Api(self.client)

    @property
    def resource(self) -> Any:
        from kubernetes.client import ResourceV1Api

        return ResourceV1Api(self.client)


def one_pass(kube: Kube) -> Change:
    """One loop of the sim operator's DRA part, as it runs it: over every node and every Running pod."""
    return dra.sync_plugin_slices(kube, kube.list("v1", "Node"), kube.list("v1", "Pod", fields="status.phase=Running"))


def until(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll `probe` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {value!r})")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    provider = SimProvider()
    started = time.monotonic()
    provider.ensure_cluster(NAME)
    try:
        groups = [("a100", "a100-40gb", 2, 8), ("mig", "a100-40gb", 1, 1), ("t4", "t4", 1, 1), ("st", "t4", 1, 4),
                  ("spare", "t4", 1, 2)]
        for group, gpu, nodes, gpus in groups:
            provider.ensure_node_group(NAME, NodeGroupSpec(group, get_gpu(gpu), nodes, gpus))
        kubeconfig = KwokCluster(NAME).kubeconfig_path
        client = api_client(kubeconfig)
        v1 = CoreV1Api(client)
        # spare-0 loses NFD's label: the chart's DaemonSet (node affinity on it) stays off it
        v1.patch_node("spare-0", {"metadata": {"labels": {L.NFD_NVIDIA_PCI: None}}}, _content_type=MERGE_PATCH)
        v1.create_namespace({"metadata": {"name": NS}})
        helm = [str(ensure_tools(["helm"])[0].path), "--kubeconfig", str(kubeconfig)]
        subprocess.run([*helm, "install", RELEASE, str(CHART), "--namespace", RELEASE, "--create-namespace",
                        "--set", "gpuResourcesEnabledOverride=true", "--set", "resources.computeDomains.enabled=false",
                        "--wait", "--timeout", "120s"], check=True, capture_output=True, text=True)
        env = dict(sim_env, KUBECONFIG=str(kubeconfig))
        yield Cluster(client, env, helm, time.monotonic() - started)
    finally:
        provider.delete_cluster(NAME)


def slices(c: Cluster) -> dict[str, dict[str, Any]]:
    """Node name -> its gpu.nvidia.com ResourceSlice."""
    items = json.loads(c.resource.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com",
                                                      _preload_content=False).data)["items"]
    by_node: dict[str, dict[str, Any]] = {}
    for item in items:
        assert item["spec"]["nodeName"] not in by_node, "one slice per node"
        by_node[item["spec"]["nodeName"]] = item
    return by_node


def plugin_pods(c: Cluster) -> dict[str, Any]:
    pods = c.v1.list_pod_for_all_namespaces(label_selector=f"{PLUGIN_COMPONENT_LABEL}={PLUGIN_COMPONENT}").items
    return {p.spec.node_name: p for p in pods if p.status.phase == "Running"}


def device_names(s: dict[str, Any]) -> list[str]:
    return [d["name"] for d in s["spec"]["devices"]]


def claim(name: str, device_class: str = "gpu.nvidia.com", cel: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def pod(name: str, claim_name: str, node_labels: dict[str, str], image: str = "busybox") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"tolerations": TOLERATE_GPU, "nodeSelector": node_labels, "restartPolicy": "Never",
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                     "containers": [{"name": "main", "image": image, "resources": {"claims": [{"name": "gpu"}]}}]}}


def claim_pod(c: Cluster, name: str, node_labels: dict[str, str], device_class: str = "gpu.nvidia.com",
              cel: str | None = None, image: str = "busybox") -> None:
    c.resource.create_namespaced_resource_claim(NS, claim(name, device_class, cel))
    c.v1.create_namespaced_pod(NS, pod(name, name, node_labels, image))


def on_node(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def scheduled(c: Cluster, names: list[str], pending: int = 0) -> dict[str, str]:
    """Wait until all but `pending` of the pods are bound and those are Unschedulable; pod -> node."""
    def probe() -> dict[str, str] | None:
        pods = [c.v1.read_namespaced_pod(n, NS) for n in names]
        bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
        refused = [p for p in pods if any(x.type == "PodScheduled" and x.reason == "Unschedulable"
                                          for x in p.status.conditions or [])]
        return bound if len(bound) == len(names) - pending and len(refused) == pending else None
    return until(f"{len(names) - pending} of {names} bound", probe)


def allocation(c: Cluster, name: str) -> list[tuple[str, str]] | None:
    data = json.loads(c.resource.read_namespaced_resource_claim(name, NS, _preload_content=False).data)
    found = (data.get("status") or {}).get("allocation")
    return [(r["pool"], r["device"]) for r in found["devices"]["results"]] if found else None


def allocated(c: Cluster, name: str) -> list[tuple[str, str]]:
    found = allocation(c, name)
    assert found is not None, f"claim {name} is not allocated"
    return found


def delete_claim_pods(c: Cluster, *names: str) -> None:
    for n in names:
        c.v1.delete_namespaced_pod(n, NS, grace_period_seconds=0)
        c.resource.delete_namespaced_resource_claim(n, NS)


def test_chart_plugin_pods_on_the_gpu_nodes_and_one_slice_each(cluster: Cluster) -> None:
    print(f"\nsim cluster {NAME!r} with 6 GPU nodes and the real chart installed in {cluster.setup_s:.1f}s")
    # helm --wait returns once the DaemonSet's pods counted so far are ready; a node labelled a moment later
    # (t4-0) gets its pod after that. Not on the CPU node system-0, nor on spare-0 (no NFD label).
    until("plugin pods on the GPU nodes", lambda: set(plugin_pods(cluster)) == GPU_NODES or None)
    by_node = until("a slice for every plugin node", lambda: s if set(s := slices(cluster)) == GPU_NODES else None)
    for node, gpus in (("a100-0", 8), ("a100-1", 8), ("mig-0", 1), ("t4-0", 1), ("st-0", 4)):
        assert device_names(by_node[node]) == [f"gpu-{i}" for i in range(gpus)]
    [t4] = by_node["t4-0"]["spec"]["devices"]
    assert t4["attributes"]["productName"] == {"string": "Tesla T4"}
    # the node records the plugin pod it serves; a converged cluster costs no write
    for node, p in plugin_pods(cluster).items():
        annotations = cluster.v1.read_node(node).metadata.annotations
        assert annotations[dra.PLUGIN_ANNOTATION] == p.metadata.uid
    versions = {n: s["metadata"]["resourceVersion"] for n, s in by_node.items()}
    # one loop of the operator's DRA part, run here: it decides there is nothing to write, and writes nothing
    assert one_pass(Kube(cluster.client)) == Change.NO_CHANGE
    assert {n: s["metadata"]["resourceVersion"] for n, s in slices(cluster).items()} == versions


def test_a_claim_is_allocated_by_the_scheduler(cluster: Cluster) -> None:
    claim_pod(cluster, "single", on_node("a100-1"))
    assert scheduled(cluster, ["single"]) == {"single": "a100-1"}
    [(pool, device)] = allocated(cluster, "single")
    assert pool == "a100-1" and device in device_names(slices(cluster)["a100-1"])


def test_ninth_gpu_claim_on_an_eight_gpu_node_stays_pending_while_others_fit_elsewhere(cluster: Cluster) -> None:
    names = [f"fill-{i}" for i in range(9)]
    for n in names:
        claim_pod(cluster, n, on_node("a100-0"))
    claim_pod(cluster, "elsewhere", {L.NODEGROUP: "a100"})  # either A100 node; a100-0 has none left
    bound = scheduled(cluster, [*names, "elsewhere"], pending=1)
    assert bound.pop("elsewhere") == "a100-1"
    assert set(bound.values()) == {"a100-0"}
    [left] = set(names) - set(bound)
    assert allocation(cluster, left) is None
    assert sorted(d for n in bound for _, d in allocated(cluster, n)) == [f"gpu-{i}" for i in range(8)]
    refused = next(x for x in cluster.v1.read_namespaced_pod(left, NS).status.conditions if x.type == "PodScheduled")
    assert "cannot allocate all claims" in refused.message


def test_mig_layout_becomes_mig_devices_a_profile_claim_gets(cluster: Cluster) -> None:
    layout = parse_layout(MIG_LAYOUT, get_gpu("a100-40gb"))
    # the MIG manager's answer (no GPU Operator here): the layout applied, state success
    applied = {L.MIG_CONFIG: config_name(layout), L.MIG_STATE: "success"}
    cluster.v1.patch_node("mig-0", {"metadata": {"labels": applied}}, _content_type=MERGE_PATCH)
    mig = until("MIG devices in mig-0's slice",
                lambda: (d if len(d := device_names(slices(cluster)["mig-0"])) == 3 else None))
    assert mig == ["gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2", "gpu-0-mig-3g20gb-9-4"]
    claim_pod(cluster, "mig-3g", {}, "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'")
    assert scheduled(cluster, ["mig-3g"]) == {"mig-3g": "mig-0"}
    assert allocation(cluster, "mig-3g") == [("mig-0", "gpu-0-mig-3g20gb-9-4")]
    delete_claim_pods(cluster, "mig-3g")


def test_a_cuda_sample_with_a_claim_completes_without_a_cluster_policy(cluster: Cluster) -> None:
    claim_pod(cluster, "vectoradd", on_node("a100-1"), image=CUDA_SAMPLE)
    done = until("the CUDA sample to finish",
                 lambda: p if (p := cluster.v1.read_namespaced_pod("vectoradd", NS)).status.phase in
                 ("Succeeded", "Failed") else None)
    assert done.status.phase == "Succeeded"
    assert "Test PASSED" in cluster.v1.read_namespaced_pod_log("vectoradd", NS)
    delete_claim_pods(cluster, "vectoradd")


def test_the_slice_goes_with_its_plugin(cluster: Cluster) -> None:
    """A plugin pod of any namespace counts; when it goes, the driver's slices of its node go (the kubelet
    wipes them) and the node's record of the plugin goes too."""
    assert "spare-0" not in slices(cluster)
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "own-plugin", "namespace": NS, "labels": {PLUGIN_COMPONENT_LABEL: PLUGIN_COMPONENT}},
            "spec": {"nodeName": "spare-0", "tolerations": TOLERATE_GPU,
                     "containers": [{"name": "gpus", "image": PLUGIN_IMAGE}]}}
    cluster.v1.create_namespaced_pod(NS, body)
    published = until("spare-0's slice", lambda: slices(cluster).get("spare-0"))
    assert device_names(published) == ["gpu-0", "gpu-1"]
    cluster.v1.delete_namespaced_pod("own-plugin", NS, grace_period_seconds=0)
    until("spare-0's slice gone", lambda: "spare-0" not in slices(cluster))
    until("spare-0's plugin record gone",
          lambda: dra.PLUGIN_ANNOTATION not in (cluster.v1.read_node("spare-0").metadata.annotations or {}))
    assert GPU_NODES <= set(slices(cluster))  # the chart's plugins keep theirs


def gpuctl(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl(*args, env=c.env, timeout=300)


def test_validate_passes_in_dra_mode(cluster: Cluster) -> None:
    started = time.monotonic()
    proc = gpuctl(cluster, "-o", "json", "validate", "--nodegroup", "t4")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr + proc.stdout
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert set(checks) == {"capacity", "dra-driver", "smoke-test", "doctor"} and all(c["ok"] for c in checks.values())
    assert checks["capacity"]["detail"].startswith("1 node publishes what was configured: 1 device ")
    smoke = checks["smoke-test"]["detail"]
    assert smoke.startswith("CUDA vectoradd passed on t4-0 with 1 gpu.nvidia.com device from ResourceClaim "
                            "gpuctl-smoke-")
    assert smoke.endswith("(allocated by the scheduler: gpu-0 of t4-0)")
    print(f"\nvalidate in DRA mode passed in {took:.1f}s")
    # the claim went with the pod
    until("the smoke test's claim gone", lambda: not cluster.resource.list_namespaced_resource_claim(
        "gpuctl-system").items)


def test_validate_uses_mig_devices_where_the_group_has_only_those(cluster: Cluster) -> None:
    until("mig-0 publishes MIG devices only", lambda: len(slices(cluster)["mig-0"]["spec"]["devices"]) == 3)
    proc = gpuctl(cluster, "-o", "json", "validate", "--nodegroup", "mig")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    checks = {c["check"]: c["detail"] for c in json.loads(proc.stdout)}
    assert checks["capacity"].startswith("1 node publishes what was configured: 3 devices")
    assert "with 1 mig.nvidia.com device from ResourceClaim" in checks["smoke-test"]
    assert "-mig-" in checks["smoke-test"].rpartition("allocated by the scheduler: ")[2]


def test_validate_fails_with_exit_6_when_no_device_is_free(cluster: Cluster) -> None:
    claim_pod(cluster, "holder", on_node("t4-0"))
    assert scheduled(cluster, ["holder"]) == {"holder": "t4-0"}
    try:
        started = time.monotonic()
        proc = gpuctl(cluster, "validate", "--nodegroup", "t4", "--timeout", "4")
        took = time.monotonic() - started
        assert proc.returncode == 6, proc.stderr
        [message] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert "smoke-test: pod gpuctl-smoke-" in message and "still Pending unscheduled after 4s" in message
        assert "no free gpu.nvidia.com device on the node group (1 of 1 allocated to ResourceClaims" in message
        assert "cannot allocate all claims" in message  # the scheduler's own words
        assert "'gpuctl nodegroup scale'" in message  # the fix
        assert took < 30, f"validate took {took:.0f}s"
        print(f"\nvalidate exited 6 in {took:.1f}s: {message}")
        assert not cluster.resource.list_namespaced_resource_claim("gpuctl-system").items  # cleaned up
    finally:
        delete_claim_pods(cluster, "holder")


def test_status_counts_devices_allocated_and_free(cluster: Cluster) -> None:
    for n in ("st-a", "st-b", "st-c"):
        claim_pod(cluster, n, on_node("st-0"))
    scheduled(cluster, ["st-a", "st-b", "st-c"])
    proc = gpuctl(cluster, "-o", "json", "status")
    assert proc.returncode == 0, proc.stderr
    rows = {r["node"]: r for r in json.loads(proc.stdout)["nodes"]}
    assert set(rows) == GPU_NODES  # spare-0 is no GPU node without NFD's label
    assert {k: rows["st-0"][k] for k in ("devices", "allocated", "free", "kubeletPlugin", "allocatable")} == {
        "devices": 4, "allocated": 3, "free": 1, "kubeletPlugin": "ready", "allocatable": {}}
    assert (rows["a100-0"]["devices"], rows["a100-0"]["allocated"], rows["a100-0"]["free"]) == (8, 8, 0)
    assert (rows["mig-0"]["devices"], rows["mig-0"]["free"]) == (3, 3)
    table = gpuctl(cluster, "status", "--nodegroup", "st")
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.split("\n\n")[0].splitlines()  # then the operator's section
    assert header.split() == ["NODE", "NODEGROUP", "GPU", "GPUS", "DEVICES", "ALLOCATED", "FREE", "KUBELET_PLUGIN"]
    assert [line.split()[0], line.split()[1], *line.split()[3:]] == ["st-0", "st", "4", "4", "3", "1", "ready"]
    delete_claim_pods(cluster, "st-a", "st-b", "st-c")


def test_uninstalling_the_driver_takes_its_slices(cluster: Cluster) -> None:
    subprocess.run([*cluster.helm, "uninstall", RELEASE, "--namespace", RELEASE, "--wait", "--timeout", "60s"],
                   check=True, capture_output=True, text=True)
    # The sim operator deletes a node's slices, then its registration mark: a pass of our own is a no-op
    # once both are gone.
    until("every slice and registration gone", lambda: not slices(cluster) and not any(
        dra.PLUGIN_ANNOTATION in (n.metadata.annotations or {}) for n in cluster.v1.list_node().items))
    assert one_pass(Kube(cluster.client)) == Change.NO_CHANGE
