"""`gpuctl top` and `gpuctl advise` on a sim cluster, reading the sim's own data plane (its DCGM exporter scraped
by a real Prometheus, found through the provider: no --prometheus): the issue's example of four whole T4s at 10%
(advise: share them, with the flag), a time-sliced T4 at 50% with three pods (top: the GPU's figures, marked),
and the advice applied with its own command until nothing is left to advise."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.output_contract import faults

pytestmark = pytest.mark.integration
CLUSTER = "watch"
WAIT_S = 90.0
UTIL, MEMORY = "sim.gpuctl.dev/gpu-utilization", "sim.gpuctl.dev/gpu-memory-mib"
SPEC = {
    "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": CLUSTER},
    "spec": {"provider": {"cloud": "sim"}, "nodeGroups": [
        {"name": "gpu", "gpu": "t4", "nodes": 4},
        {"name": "slices", "gpu": "t4", "nodes": 1, "sharing": {"timeSlicing": {"replicas": 4}}}],
        "tenants": [{"name": "team-a", "gpus": 6}, {"name": "team-b", "gpus": 2}]},
}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.support.tools import ensure_tools

    ensure_tools(["prometheus"], print)  # a first build (minutes) outside the waits below
    root = tmp_path_factory.mktemp("watch")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    spec = root / "cluster.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    proc = run_gpuctl("apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def pod(namespace: str, name: str, group: str, util: int, memory: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {UTIL: str(util), MEMORY: str(memory)}},
            "spec": {"nodeSelector": {"gpuctl.dev/nodegroup": group},
                     "containers": [{"name": "work", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def wait_for(what: str, done: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := done()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout:.0f}s: {what}")
        time.sleep(1)
    return result


def prometheus(url: str, query: str) -> list[dict[str, Any]]:
    """A query straight to Prometheus's HTTP API, gpuctl aside."""
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=30) as answer:
        return json.load(answer)["data"]["result"]


def gpuctl_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = run_gpuctl("-o", "json", *args, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert not faults(result), faults(result)  # the output contract (docs/reference.md)
    return result


@pytest.fixture(scope="module")
def loaded(cluster: dict[str, str]) -> dict[str, str]:
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(cluster["KUBECONFIG"]))
    for i in range(4):  # the example: four whole T4s, each at 10%, 2 GiB used
        v1.create_namespaced_pod("team-a", pod("team-a", f"job-{i}", "gpu", 10, 2048))
    for namespace, name in (("team-b", "serve-1"), ("team-b", "serve-2"), ("team-a", "serve-3")):
        v1.create_namespaced_pod(namespace, pod(namespace, name, "slices", 50 if name == "serve-1" else 0, 1024))
    wait_for("the pods running", lambda: sum(p.status.phase == "Running" for ns in ("team-a", "team-b")
                                             for p in v1.list_namespaced_pod(ns).items) == 7)
    return cluster


def test_top_shows_each_gpu_its_pods_and_the_shared_gpus_figures_once(loaded: dict[str, str]) -> None:
    def ready() -> dict[str, Any] | None:
        view = gpuctl_json(loaded, "top", "--since", "1m")
        gpus = {g["node"]: g for g in view["gpus"]}
        settled = len(gpus) == 5 and all(g["pods"] and g["smActiveAvg"] is not None for g in gpus.values())
        return view if settled else None

    view = wait_for("top's figures for five GPUs", ready)
    gpus = {g["node"]: g for g in view["gpus"]}
    for i in range(4):
        assert gpus[f"gpu-{i}"]["gpuUtil"] == 10 and gpus[f"gpu-{i}"]["fbUsedMib"] == 2048
        assert gpus[f"gpu-{i}"]["attribution"] == "pod" and gpus[f"gpu-{i}"]["nodegroup"] == "gpu"
    direct = {(s["metric"]["hostname"], int(s["metric"]["gpu"]), name): float(s["value"][1])  # the same series, asked directly
              for name, family in (("gpuUtil", "DCGM_FI_DEV_GPU_UTIL"), ("fbUsedMib", "DCGM_FI_DEV_FB_USED"))
              for s in prometheus(view["prometheus"], f"max by (hostname, gpu) ({family})")}
    assert {(g["node"], g["gpu"], name): g[name] for g in view["gpus"] for name in ("gpuUtil", "fbUsedMib")} == direct
    shared = gpus["slices-0"]
    assert shared["gpuUtil"] == 50 and shared["attribution"] == "device"
    assert shared["pods"] == ["team-a/serve-3", "team-b/serve-1", "team-b/serve-2"]
    assert any("#307" in n for n in view["notes"])
    tenants = {t["tenant"]: t for t in view["tenants"]}
    assert tenants["team-a"]["used"] == {"nvidia.com/gpu": 5} and tenants["team-a"]["quota"]["nvidia.com/gpu"] == 6
    assert tenants["team-b"]["used"] == {"nvidia.com/gpu": 2}
    mine = gpuctl_json(loaded, "top", "--since", "1m", "--tenant", "team-a")  # the team's GPUs, summed
    assert [t["tenant"] for t in mine["tenants"]] == ["team-a"] and mine["tenants"][0]["used"] == {
        "nvidia.com/gpu": 5}
    assert sorted(g["node"] for g in mine["gpus"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "slices-0"]
    table = run_gpuctl("top", "--since", "1m", "--nodegroup", "slices", env=loaded, timeout=120)
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    assert "slices-0 (node group slices)" in table.stdout and "gpu-0" not in table.stdout


def test_every_dashboard_panel_answers_from_the_real_prometheus_as_grafana_asks(loaded: dict[str, str],
                                                                              tmp_path: Path) -> None:
    """The dashboard `render` writes for this cluster's spec, each panel's query sent as Grafana sends it (time
    series: a range query; tables: an instant query) with the window variable's default value."""
    import urllib.parse
    import urllib.request

    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    proc = run_gpuctl("render", "-f", str(spec), "--out", str(tmp_path / "out"), env=loaded)
    assert proc.returncode == 0, proc.stderr
    board = json.loads((tmp_path / "out" / "grafana" / "gpuctl-dashboard.json").read_text())
    window = next(v for v in board["templating"]["list"] if v["name"] == "window")["current"]["value"]
    url = gpuctl_json(loaded, "top", "--since", "1m")["prometheus"]

    def ask(panel: dict[str, Any]) -> list[dict[str, Any]]:
        expr = panel["targets"][0]["expr"].replace("$window", window)
        now = time.time()
        form = {"query": expr, **({"time": f"{now}"} if panel["type"] == "table" else
                                  {"start": f"{now - 120}", "end": f"{now}", "step": "15"})}
        path = "query" if panel["type"] == "table" else "query_range"
        request = urllib.request.Request(f"{url}/api/v1/{path}", urllib.parse.urlencode(form).encode())
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = json.load(answer)
        assert body["status"] == "success", (panel["title"], body)
        return list(body["data"]["result"])

    row, answered = "", {}
    for panel in board["panels"]:
        if panel["type"] == "row":
            row = panel["title"].split(" (")[0].split(":")[0]  # "All GPUs", "Tesla T4", "tenant team-a"
        else:
            answered[(row, panel["title"].split(" (")[0])] = ask(panel)
    assert len(answered) == 13 + 13 + 3 + 3  # all GPUs, the T4 row (both groups are T4s), two tenants
    for row in ("All GPUs", "Tesla T4"):
        assert {s["metric"]["hostname"] for s in answered[(row, "SM activity")]} == {
            "gpu-0", "gpu-1", "gpu-2", "gpu-3", "slices-0"}
        assert {s["metric"].get("pod") for s in answered[(row, "Pods on each GPU now")]} == {
            None, "job-0", "job-1", "job-2", "job-3", "serve-1", "serve-2", "serve-3"}  # None: the devices' own
    for tenant, held in (("team-a", "5"), ("team-b", "2")):  # devices its pods hold, as top counts them
        peak = answered[(f"tenant {tenant}", "GPUs held, peak over ${window:text}")]
        assert {s["metric"]["namespace"] for s in peak} == {tenant} and peak[0]["values"][-1][1] == held


def test_advise_shares_the_idle_whole_t4s_and_its_command_applies_it(loaded: dict[str, str]) -> None:
    def advised() -> list[dict[str, Any]] | None:
        listed: list[dict[str, Any]] = gpuctl_json(loaded, "advise", "--since", "1m")["advice"]
        return listed if any(a["rule"] == "share-idle-gpus" for a in listed) else None

    listed = wait_for("advice to share node group gpu", advised)
    advice = next(a for a in listed if a["rule"] == "share-idle-gpus")
    assert advice["nodegroup"] == "gpu" and advice["figures"]["peakUtilPct"] == 10
    assert advice["figures"]["slices"] == 7  # min(100 / 10%, 15 GiB / 2 GiB, 64)
    assert advice["command"] == (f"gpuctl cluster create --cloud sim --name {CLUSTER} --nodegroup-name gpu --gpu t4 "
                                 "--nodes 4 --slices 7")
    # the same run of advise: the time-sliced T4 at 50% with three pods, nothing to change
    assert all(a["nodegroup"] != "slices" for a in listed if "nodegroup" in a), listed
    proc = run_gpuctl(*shlex.split(advice["command"])[1:], env=loaded)
    assert proc.returncode == 0, proc.stderr
    nodes = gpuctl_json(loaded, "status", "--nodegroup", "gpu")["nodes"]
    assert {n["replicas"] for n in nodes} == {7} and {n["sharing"] for n in nodes} == {"time-slicing"}
    after = gpuctl_json(loaded, "advise", "--since", "1m")
    assert [a for a in after["advice"] if a.get("nodegroup") == "gpu"] == []


def test_an_xid_79_on_a_gpu_is_marked_by_status_and_top_and_is_no_idle_capacity_to_advise(
        loaded: dict[str, str]) -> None:
    """The sim's XID fault (node annotation sim.gpuctl.dev/fault-xid, simulator/xid.py) on gpu-3's GPU 0: its device
    plugin marks the GPU unhealthy, the node keeps it in capacity and not in allocatable, and the DCGM exporter
    reports XID 79 for it. status counts it, top marks that GPU and no other, advise leaves it out and says so.
    Last in the module: a GPU once unhealthy stays so while its plugin pod runs."""
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(loaded["KUBECONFIG"]))
    v1.patch_node("gpu-3", {"metadata": {"annotations": {"sim.gpuctl.dev/fault-xid": "0:79"}}})

    def status_marks() -> dict[str, Any] | None:
        nodes = {n["node"]: n for n in gpuctl_json(loaded, "status")["nodes"]}
        return nodes if nodes["gpu-3"]["unhealthy"] else None

    nodes = wait_for("status to count gpu-3's GPU unhealthy", status_marks)
    node = nodes["gpu-3"]
    assert node["unhealthy"] == {"nvidia.com/gpu": node["replicas"]} and node["unhealthyGpus"] == 1  # every replica
    assert node["allocatable"] == {} and [n for n, row in nodes.items() if row["unhealthy"]] == ["gpu-3"]
    table = run_gpuctl("status", env=loaded, timeout=120)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("gpu-3 "))
    assert row.split()[3] == "0/1!" and f"  gpu-3: {node['replicas']} of {node['replicas']} nvidia.com/gpu (1 GPU)" \
        in table.stdout, table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80

    def top_marks() -> dict[str, Any] | None:
        view = gpuctl_json(loaded, "top", "--since", "1m")
        return view if any(g["health"] == "unhealthy" for g in view["gpus"]) else None

    view = wait_for("top to mark gpu-3's GPU by its XID", top_marks)
    marked = [(g["node"], g["gpu"], g["xid"]) for g in view["gpus"] if g["health"] != "healthy"]
    assert marked == [("gpu-3", 0, 79)], view["gpus"]
    assert [u["node"] for u in view["unhealthy"]] == ["gpu-3"] and view["unhealthy"][0]["unnamed"] == {}

    def advised() -> dict[str, Any] | None:  # once Prometheus covers the window (advice is withheld before)
        result = gpuctl_json(loaded, "advise", "--since", "1m")
        return None if result["withheld"] else result

    notes = wait_for("advise to read a covered window", advised)["notes"]
    assert any("not idle capacity" in n and n.endswith("gpu-3 GPU 0 (XID 79)") for n in notes), notes
