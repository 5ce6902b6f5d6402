"""The sim's GPU data plane: its DCGM exporter (gpuctl/simulator/dcgm_exporter.py) serves what dcgm-exporter
4.6.0-4.8.3 would for each GPU and MIG instance, loaded by the pods' sim.gpuctl.dev/ annotations, and a real
Prometheus (the pinned tool) scrapes it; the assertions read Prometheus's HTTP API, as `gpuctl top` does."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.kube_api import core
from tests.output_contract import faults

pytestmark = pytest.mark.integration
CLUSTER = "mon"
WAIT_S = 60.0
SPEC = {
    "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": CLUSTER},
    "spec": {"provider": {"cloud": "sim"}, "nodeGroups": [
        {"name": "slices", "gpu": "t4", "nodes": 1, "sharing": {"timeSlicing": {"replicas": 4}}},
        {"name": "mig", "gpu": "a100-40gb", "nodes": 1, "gpusPerNode": 2,
         "sharing": {"mig": {"layout": "3g.20gb-2x2g.10gb"}}}]},
}
UTIL, MEMORY = "sim.gpuctl.dev/gpu-utilization", "sim.gpuctl.dev/gpu-memory-mib"


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.support.sim import KwokCluster, cluster_procs, ensure_monitoring, workdir
    from tests.support.tools import ensure_tools

    ensure_tools(["prometheus"], print)  # a first build (minutes) outside the timings below
    root = tmp_path_factory.mktemp("mon")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    spec = root / "cluster.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    proc = run_gpuctl("apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    started = time.monotonic()
    env["URL"] = ensure_monitoring(CLUSTER)
    print(f"\nmonitoring up in {time.monotonic() - started:.1f}s at {env['URL']}")
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert cluster_procs(workdir(), CLUSTER) == ([], []), "a monitoring process outlived its cluster"
    assert not KwokCluster(CLUSTER).dir.exists()


def wait_for(what: str, done: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := done()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout:.0f}s: {what}")
        time.sleep(0.25)
    return result


def query(env: dict[str, str], promql: str) -> list[dict[str, Any]]:
    """Prometheus's instant query: [{metric: labels, value: [time, "value"]}, ...]."""
    url = f"{env['URL']}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def create_pods(env: dict[str, str], group: str, pods: dict[str, tuple[str, int, int]]) -> None:
    """Pods named as the keys, each asking for one of a resource with (resource, utilization %, memory MiB)."""
    v1 = core(env)
    for name, (resource, util, memory) in pods.items():
        v1.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "monitoring-test"},
                         "annotations": {UTIL: str(util), MEMORY: str(memory)}},
            "spec": {"nodeSelector": {"gpuctl.dev/nodegroup": group},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "work", "image": "busybox", "resources": {"limits": {resource: "1"}}}]}})
    wait_for(f"pods {sorted(pods)} running", lambda: {p.metadata.name for p in v1.list_namespaced_pod(
        "default", label_selector="app=monitoring-test").items if p.status.phase == "Running"} >= set(pods))


@pytest.fixture
def no_pods(cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    def reset() -> None:
        v1 = core(cluster)
        v1.delete_collection_namespaced_pod("default", label_selector="app=monitoring-test", grace_period_seconds=0)
        wait_for("no test pods", lambda: not v1.list_namespaced_pod("default",
                                                                    label_selector="app=monitoring-test").items)

    reset()
    yield cluster
    reset()


def by_pod(results: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"].get("pod", ""): float(r["value"][1]) for r in results}


def test_a_time_sliced_gpu_reports_its_pods_load(no_pods: dict[str, str]) -> None:
    started = time.monotonic()
    create_pods(no_pods, "slices", {"ts-a": ("nvidia.com/gpu", 20, 1024), "ts-b": ("nvidia.com/gpu", 20, 2048),
                                    "ts-c": ("nvidia.com/gpu", 10, 512)})
    util = wait_for("the T4's utilization at 50 with three pod series", lambda: (
        r if by_pod(r := query(no_pods, 'DCGM_FI_DEV_GPU_UTIL{hostname="slices-0"}')) ==
        {"": 50, "ts-a": 20, "ts-b": 20, "ts-c": 10} else None))
    print(f"\nload visible in Prometheus {time.monotonic() - started:.1f}s after the pods were created")
    [gpu] = top(no_pods, "--nodegroup", "slices")["gpus"]  # what a user sees: the GPU at 50% with its three pods
    assert (gpu["gpuUtil"], gpu["smActive"], gpu["fbUsedMib"]) == (50, 50, 3584)
    assert gpu["pods"] == ["default/ts-a", "default/ts-b", "default/ts-c"] and gpu["attribution"] == "device"
    device = next(r["metric"] for r in util if "pod" not in r["metric"])
    assert device["job"] == "nvidia-dcgm-exporter" and device["modelName"] == "Tesla T4"
    assert device["gpu"] == "0" and device["device"] == "nvidia0" and device["UUID"].startswith("GPU-")
    assert device["DCGM_FI_DRIVER_VERSION"] == "570.172.08" and device["pci_bus_id"] == "00000000:11:00.0"
    engine = query(no_pods, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="slices-0"}')
    assert by_pod(engine) == {"ts-a": 0.5, "ts-b": 0.5, "ts-c": 0.5}  # the device's value on each pod's series
    assert sorted(r["metric"]["vgpu"] for r in engine) == ["0", "1", "2"]
    assert {(r["metric"]["namespace"], r["metric"]["container"]) for r in engine} == {("default", "work")}
    assert by_pod(query(no_pods, 'DCGM_FI_DEV_FB_USED{hostname="slices-0"}')) == \
        {"": 3584, "ts-a": 1024, "ts-b": 2048, "ts-c": 512}
    assert set(by_pod(query(no_pods, 'DCGM_FI_DEV_FB_FREE{hostname="slices-0"}')).values()) == {15360 - 3584}

    before = {r["metric"]["pod"]: r["metric"]["vgpu"] for r in engine}
    core(no_pods).delete_namespaced_pod("ts-a", "default", grace_period_seconds=0)
    wait_for("ts-a gone from the GPU", lambda: by_pod(query(no_pods, 'DCGM_FI_DEV_GPU_UTIL{hostname="slices-0"}'))
             == {"": 30, "ts-b": 20, "ts-c": 10})
    after = {r["metric"]["pod"]: r["metric"]["vgpu"]
             for r in query(no_pods, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="slices-0"}')}
    assert after == {pod: vgpu for pod, vgpu in before.items() if pod != "ts-a"}  # the others keep their replicas


def test_mig_instances_report_per_instance_with_their_profile(no_pods: dict[str, str]) -> None:
    create_pods(no_pods, "mig", {"big-0": ("nvidia.com/mig-3g.20gb", 70, 4096),
                                 "big-1": ("nvidia.com/mig-3g.20gb", 30, 0),
                                 "small": ("nvidia.com/mig-2g.10gb", 40, 1000)})
    engine = wait_for("the MIG pods' load", lambda: (
        r if by_pod(r := query(no_pods, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="mig-0"}')) ==
        {"": 0, "big-0": 0.7, "big-1": 0.3, "small": 0.4} else None))
    instances = {(r["metric"]["gpu"], r["metric"]["GPU_I_PROFILE"], r["metric"]["GPU_I_ID"]): r["metric"].get("pod", "")
                 for r in engine}
    # 2 GPUs x (2g.10gb at slot 0 and 2, 3g.20gb at slot 4); each 3g.20gb pod has one GPU's 3g.20gb instance
    assert sorted(instances) == [(g, p, i) for g in ("0", "1") for p, i in (("2g.10gb", "3"), ("2g.10gb", "4"),
                                                                            ("3g.20gb", "2"))]
    assert sorted(v for (_, p, _), v in instances.items() if p == "3g.20gb") == ["big-0", "big-1"]
    assert query(no_pods, 'DCGM_FI_DEV_GPU_UTIL{hostname="mig-0"}') == []  # MIG instances do not report it
    free = {r["metric"].get("pod", ""): float(r["value"][1])
            for r in query(no_pods, 'DCGM_FI_DEV_FB_FREE{hostname="mig-0", GPU_I_PROFILE="3g.20gb"}')}
    assert free == {"big-0": 19968 - 4096, "big-1": 19968}
    shown = {(g["gpu"], g["migProfile"], g["migInstance"]): (g["smActive"], g["gpuUtil"], g["pods"])
             for g in top(no_pods, "--nodegroup", "mig")["gpus"]}
    assert len(shown) == 6 and {v[1] for v in shown.values()} == {None}  # per instance, no GPU_UTIL under MIG
    assert sorted(v[:1] + tuple(v[2]) for v in shown.values() if v[2]) == \
        [(30, "default/big-1"), (40, "default/small"), (70, "default/big-0")]


def top(env: dict[str, str], *args: str) -> dict[str, Any]:
    """`gpuctl -o json top` as a user runs it, on the sim's own Prometheus."""
    proc = run_gpuctl("-o", "json", "top", "--since", "1m", *args, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = dict(json.loads(proc.stdout))
    assert not faults(result), faults(result)  # the output contract (docs/reference.md)
    return result


def test_the_exporter_speaks_prometheus_text_and_monitoring_is_idempotent(cluster: dict[str, str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.sim import (
        dcgm_exporter_address,
        ensure_monitoring,
        get_dcgm_exporter_pid,
        get_prometheus_pid,
        monitoring_url,
    )

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{dcgm_exporter_address(CLUSTER)}/metrics", timeout=5) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_DEV_XID_ERRORS"} <= families.keys()
    assert families["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    assert families["DCGM_FI_DEV_GPU_UTIL"].documentation == "GPU utilization (in %)."
    # one T4 and six MIG instances: every family but GPU_UTIL (GPUs only) has a series for each when idle
    assert len(families["DCGM_FI_DEV_FB_FREE"].samples) >= 7

    pids = get_dcgm_exporter_pid(CLUSTER), get_prometheus_pid(CLUSTER)
    assert ensure_monitoring(CLUSTER) == monitoring_url(CLUSTER) == cluster["URL"]
    assert (get_dcgm_exporter_pid(CLUSTER), get_prometheus_pid(CLUSTER)) == pids
