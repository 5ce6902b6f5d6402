"""gpuctl's PromQL (gpuctl/model/promql.py) run by Prometheus's own engine (github.com/prometheus/prometheus
v0.316.0, Prometheus 3.x, through tests/conformance/promql_engine, built from the Go module proxy) over series
shaped as dcgm-exporter 4.x writes them: scraped through a ServiceMonitor that renamed the workload's labels
to exported_* (honorLabels false, the GPU Operator's default), or as they are; the node in `Hostname` or, after
dcgm-exporter #655, `hostname`; one series per pod of a shared GPU with the GPU's value (#307). The engine's
answers are then served by the fake Prometheus, so `top` and `advise` read what a real Prometheus would say."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuctl.api import GroupPlan
from tests.support.kube import Prometheus
from tests.support.model import GPUS, NodeGroupSpec, promql
from tests.support.ops import ClusterView, NodeInfo, PodInfo, TenantInfo, advice_of, read_metrics, top_of
from tests.support.util import cache_dir
from tests.unit.fake_prometheus import Canned, fake_prometheus

pytestmark = pytest.mark.conformance  # builds a Go program of upstream code (the Go toolchain, once per version)

SOURCE = Path(__file__).parent / "promql_engine"
MINUTES = 60  # samples every minute for an hour; the queries are evaluated at its end, over --since 1h


@pytest.fixture(scope="module")
def engine() -> Path:
    digest = hashlib.sha256(b"".join((SOURCE / n).read_bytes() for n in ("main.go", "go.mod", "go.sum")))
    binary = cache_dir() / "test-tools" / f"promql-engine-{digest.hexdigest()[:16]}"
    if not binary.exists():  # the cache first: a machine without Go still runs an engine built before
        go = shutil.which("go")
        if go is None:
            pytest.skip("needs Go to build Prometheus's PromQL engine")
        binary.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([go, "build", "-o", str(binary), "."], cwd=SOURCE, capture_output=True, text=True,
                              timeout=1500, env={**os.environ, "CGO_ENABLED": "0"})
        assert proc.returncode == 0, proc.stderr[-4000:]
    return binary


def series(metric: str, labels: dict[str, str], value: float, start: int = 0) -> str:
    """One series in promqltest's notation: absent before minute `start`, then `value` every minute."""
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    values = (f"_x{start} " if start else "") + f"{value}+0x{MINUTES - start}"
    return f"  {metric}{{{text}}} {values}"


def exporter(node: str, gpu: int, model: str, node_label: str = "Hostname",
             mig: tuple[str, int] | None = None) -> dict[str, str]:
    """dcgm-exporter's own labels of a device (internal/pkg/rendermetrics, 4.5.3-4.8.2)."""
    labels = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "pci_bus_id": f"00000000:0{gpu}:00.0",
              "device": f"nvidia{gpu}", "modelName": model, node_label: node, "DCGM_FI_DRIVER_VERSION": "580.95.05"}
    if mig is not None:
        labels.update({"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])})
    return labels


def renamed(pod: tuple[str, str] | None) -> dict[str, str]:
    """What a ServiceMonitor with honorLabels false adds: the target's labels, the workload's as exported_*."""
    target = {"instance": "10.0.0.7:9400", "job": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
              "service": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7",
              "container": "nvidia-dcgm-exporter"}
    if pod is None:
        return target
    return {**target, "exported_namespace": pod[0], "exported_pod": pod[1], "exported_container": "main"}


def plain(pod: tuple[str, str] | None) -> dict[str, str]:
    """A scrape that keeps dcgm-exporter's labels (a static config, or honorLabels true)."""
    base = {"instance": "10.0.1.9:9400", "job": "dcgm"}
    return base if pod is None else {**base, "namespace": pod[0], "pod": pod[1], "container": "main"}


def load() -> str:
    lines = ["load 1m"]
    t4, a100 = "Tesla T4", "NVIDIA A100-SXM4-40GB"
    # node group gpu: 4 whole T4s, one pod each, at 10% (GR engine 8%), 2 GiB used, through a ServiceMonitor
    for node in ("gpu-0", "gpu-1"):
        for gpu in (0, 1):
            labels = {**exporter(node, gpu, t4), **renamed(("team-a", f"job-{node}-{gpu}"))}
            lines += [series(promql.GPU_UTIL, labels, 10), series(promql.SM_ACTIVE, labels, 0.08),
                      series(promql.FB_USED, labels, 2048), series(promql.FB_FREE, labels, 13312),
                      series(promql.XID_ERRORS, labels, 79 if (node, gpu) == ("gpu-1", 1) else 0)]
    # node group inference: one time-sliced T4, a series per pod with the GPU's value (KUBERNETES_VIRTUAL_GPUS),
    # the third pod there for the last half hour; dcgm-exporter after #655 (`hostname`), scraped as it is
    for pod, start in ((("team-b", "serve-1"), 0), (("team-b", "serve-2"), 0), (("team-a", "serve-3"), 30)):
        labels = {**exporter("inference-0", 0, t4, node_label="hostname"), **plain(pod)}
        lines += [series(promql.GPU_UTIL, labels, 50, start), series(promql.SM_ACTIVE, labels, 0.45, start),
                  series(promql.FB_USED, labels, 9216, start), series(promql.FB_FREE, labels, 6144, start)]
    # node group training: an A100 as 3g.20gb + 2 x 2g.10gb; the 3g.20gb busy, the others idle (no pod: the
    # exporter's own pod fills `pod` through the ServiceMonitor); no GPU_UTIL for MIG instances
    for mig, owner, active, used in ((("3g.20gb", 1), ("team-b", "finetune"), 0.6, 12000),
                                     (("2g.10gb", 5), None, 0, 0), (("2g.10gb", 6), None, 0, 0)):
        labels = {**exporter("training-0", 0, a100, mig=mig), **renamed(owner)}
        lines += [series(promql.SM_ACTIVE, labels, active), series(promql.FB_USED, labels, used),
                  series(promql.FB_FREE, labels, 20096 - used if mig[0] == "3g.20gb" else 9856)]
    return "\n".join(lines) + "\n"


def queries() -> list[str]:
    where = promql.Where()
    return [build(where) for build in (*promql.DEVICE_NOW.values(), *promql.DEVICE_WINDOW.values(),
                                       *promql.TENANT_WINDOW.values(), promql.pods_now, promql.pods_over,
                                       promql.coverage)]


@pytest.fixture(scope="module")
def answers(engine: Path) -> dict[str, list[dict]]:
    proc = subprocess.run([str(engine)], input=json.dumps({"load": load(), "at": f"{MINUTES}m", "queries": queries()}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    errors = {q: r["error"] for q, r in result.items() if isinstance(r, dict)}
    assert errors == {}, errors
    return result


def cluster() -> ClusterView:
    t4, a100 = GPUS["t4"], GPUS["a100-40gb"]
    nodes = {"gpu-0": NodeInfo("gpu-0", "gpu", t4, "none", 1, None),
             "gpu-1": NodeInfo("gpu-1", "gpu", t4, "none", 1, None),
             "inference-0": NodeInfo("inference-0", "inference", t4, "time-slicing", 4, None),
             "training-0": NodeInfo("training-0", "training", a100, "none", 1, "3g.20gb-2x2g.10gb")}
    pods = [PodInfo("team-a", f"job-{n}-{g}", n, "Running", {"nvidia.com/gpu": 1}) for n in ("gpu-0", "gpu-1")
            for g in (0, 1)]
    pods += [PodInfo("team-b", "serve-1", "inference-0", "Running", {"nvidia.com/gpu": 1}),
             PodInfo("team-b", "serve-2", "inference-0", "Running", {"nvidia.com/gpu": 1}),
             PodInfo("team-a", "serve-3", "inference-0", "Running", {"nvidia.com/gpu": 1}),
             PodInfo("team-b", "finetune", "training-0", "Running", {"nvidia.com/mig-3g.20gb": 1}),
             PodInfo("gpu-operator", "nvidia-dcgm-exporter-x7", "training-0", "Running", {})]
    tenants = {"team-a": TenantInfo("team-a", {"nvidia.com/gpu": 24}, None, None),
               "team-b": TenantInfo("team-b", {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}, None, None)}
    return ClusterView(nodes, pods, tenants)


def read(answers: dict[str, list[dict]]) -> tuple[dict, dict]:
    canned = Canned(answers=answers)
    with fake_prometheus(canned) as url:
        metrics = read_metrics(Prometheus(url), "1h")
    assert metrics.coverage == 1.0  # series at every step of the hour
    return metrics.devices, metrics.usage


def test_every_query_is_one_prometheus_runs(answers: dict[str, list[dict]]) -> None:
    assert set(answers) == set(queries())
    assert all(answers[q] for q in queries())  # each finds series in dcgm-exporter's shape


def test_devices_read_through_either_scrape_and_either_node_label(answers: dict[str, list[dict]]) -> None:
    devices, _ = read(answers)
    by_name = {(d.node, d.name): d for d in devices.values()}
    assert set(by_name) == {("gpu-0", "0"), ("gpu-0", "1"), ("gpu-1", "0"), ("gpu-1", "1"), ("inference-0", "0"),
                            ("training-0", "0/3g.20gb#1"), ("training-0", "0/2g.10gb#5"), ("training-0", "0/2g.10gb#6")}
    t4 = by_name["gpu-0", "1"]
    assert t4.values["sm_active"] == pytest.approx(8) and t4.values["gpu_util"] == 10
    assert t4.values["fb_total_mib"] == 15360 and t4.pods == {("team-a", "job-gpu-0-1")}  # exported_*, not the exporter
    assert (t4.values["xid"], by_name["gpu-1", "1"].values["xid"]) == (0, 79)  # DCGM's last XID, per GPU
    shared = by_name["inference-0", "0"]
    assert shared.values["gpu_util"] == 50 and shared.values["fb_used_mib"] == 9216  # the GPU's, not 3 x
    assert shared.pods == {("team-b", "serve-1"), ("team-b", "serve-2"), ("team-a", "serve-3")}
    assert shared.values["sm_active_avg"] == pytest.approx(45)  # the GPU's average, pods coming and going
    mig = by_name["training-0", "0/3g.20gb#1"]
    assert "gpu_util" not in mig.values and mig.values["sm_active_peak"] == pytest.approx(60)
    assert by_name["training-0", "0/2g.10gb#5"].pods == {("gpu-operator", "nvidia-dcgm-exporter-x7")}


def test_top_from_prometheus_answers(answers: dict[str, list[dict]]) -> None:
    devices, usage = read(answers)
    view = top_of(cluster(), devices, usage)
    rows = {(g["node"], g["gpu"], g["mig_profile"], g["mig_instance"]): g for g in view["gpus"]}
    assert rows["inference-0", 0, None, None]["attribution"] == "device"
    assert rows["training-0", 0, "2g.10gb", 5]["pods"] == []  # the exporter's own pod is no workload
    tenants = {t["tenant"]: t for t in view["tenants"]}
    # team-a: 4 whole GPUs all hour, serve-3 on the shared one for the last 121 of the 240 steps (15 s) of the hour
    assert tenants["team-a"]["used_avg"]["nvidia.com/gpu"] == pytest.approx(4 + 121 / 240, abs=0.006)
    assert tenants["team-a"]["used_peak"]["nvidia.com/gpu"] == 5
    assert tenants["team-a"]["busy_avg"] == pytest.approx(4 * 0.08 + 0.45 * 121 / 240, abs=0.006)
    assert tenants["team-b"]["used_avg"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}
    assert set(tenants) == {"team-a", "team-b"}
    assert {g["health"] for g in view["gpus"]} == {"healthy"}  # an XID where no node reports a failed GPU
    failing = cluster()
    failing.nodes["gpu-1"] = NodeInfo("gpu-1", "gpu", GPUS["t4"], "none", 1, None, {"nvidia.com/gpu": 1})
    marked = [(g["node"], g["gpu"], g["xid"]) for g in top_of(failing, devices, usage)["gpus"]
              if g["health"] != "healthy"]
    assert marked == [("gpu-1", 1, 79)]


def test_advise_from_prometheus_answers(answers: dict[str, list[dict]]) -> None:
    devices, usage = read(answers)
    t4 = GPUS["t4"]
    records = {"gpu": GroupPlan(NodeGroupSpec("gpu", t4, 2, 2))}
    advice = advice_of(cluster(), records, devices, usage, "1h", ("sim", "demo"))
    by_rule = {a["rule"]: a for a in advice}
    share = by_rule["share-idle-gpus"]
    assert share["figures"]["slices"] == 7 and share["command"].endswith("--gpus-per-node 2 --slices 7")
    assert by_rule["unused-quota"]["command"] == "gpuctl tenant add team-a --gpus 5"
    assert "saturated-sharing" not in by_rule  # the shared T4 at 50% with 3 pods
