"""`gpuctl top` (gpuctl/ops/metrics/top.py) on dcgm-exporter-shaped answers from a FAKE Prometheus on 127.0.0.1 (real
sockets, canned answers: tests/unit/fake_prometheus.py) and a cluster given as data: devices, pods and tenants
read, the exporter's own pod never taken for a workload, a shared GPU's figures marked as the GPU's, and the
table within 80 columns."""

from __future__ import annotations

import json

import yaml

from gpuctl.kube.prometheus import Prometheus
from gpuctl.model import promql
from gpuctl.model.catalog import GPUS
from gpuctl.ops.metrics.gpu_metrics import (
    ClusterView,
    Metrics,
    NodeInfo,
    PodInfo,
    TenantInfo,
    coverage_note,
    queries,
    read_devices,
    read_tenant_series,
)
from gpuctl.ops.metrics.top import SHARED_NOTE, UNHEALTHY_NOTE, UNKNOWN_NOTE, render_table, top_of
from tests.unit.fake_prometheus import Canned, add_device, add_tenant, device, fake_prometheus

T4_MIB = 15360


def cluster() -> ClusterView:
    nodes = {
        "gpu-0": NodeInfo("gpu-0", "gpu", GPUS["t4"], "none", 1, None),
        "inference-0": NodeInfo("inference-0", "inference", GPUS["t4"], "time-slicing", 4, None),
        "training-0": NodeInfo("training-0", "training", GPUS["a100-40gb"], "none", 1, "all-balanced"),
    }
    pods = [
        PodInfo("team-a", "train-1", "gpu-0", "Running", {"nvidia.com/gpu": 1}),
        PodInfo("team-b", "serve-1", "inference-0", "Running", {"nvidia.com/gpu": 1}),
        PodInfo("team-b", "serve-2", "inference-0", "Running", {"nvidia.com/gpu": 1}),
        PodInfo("team-a", "serve-3", "inference-0", "Running", {"nvidia.com/gpu": 1}),
        PodInfo("team-b", "finetune", "training-0", "Running", {"nvidia.com/mig-3g.20gb": 1}),
        PodInfo("gpu-operator", "nvidia-dcgm-exporter-x7", "gpu-0", "Running", {}),
    ]
    tenants = {"team-a": TenantInfo("team-a", {"nvidia.com/gpu": 4}, "team-a-devs", None),
               "team-b": TenantInfo("team-b", {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 2}, None, None)}
    return ClusterView(nodes, pods, tenants)


def canned() -> Canned:
    c = Canned()
    # a whole GPU with one pod, and one with none where the exporter's own pod fills `pod` (a ServiceMonitor
    # with honorLabels true: nothing renamed it)
    add_device(c, device("gpu-0", 0), sm=12.0, util=15.0, used=3072, total=T4_MIB, pods=[("team-a", "train-1")],
               sm_avg=10.0)
    add_device(c, device("gpu-0", 1), sm=0.0, util=0.0, used=0, total=T4_MIB,
               pods=[("gpu-operator", "nvidia-dcgm-exporter-x7")])
    # a time-sliced GPU three pods share, from a dcgm-exporter that spells the node label `hostname` (#655)
    add_device(c, device("inference-0", 0, node_label="hostname"), sm=50.0, util=55.0, used=9216, total=T4_MIB,
               pods=[("team-b", "serve-1"), ("team-b", "serve-2"), ("team-a", "serve-3")])
    # a MIG instance: no GPU_UTIL
    add_device(c, device("training-0", 0, "NVIDIA A100-SXM4-40GB", mig=("3g.20gb", 1)), sm=70.0, util=None,
               used=10240, total=20096, pods=[("team-b", "finetune")])
    add_tenant(c, "team-a", allocated_avg=1.5, allocated_peak=2, busy_avg=0.35)
    add_tenant(c, "team-b", allocated_avg=2, allocated_peak=2, busy_avg=1.0)
    add_tenant(c, "team-b", allocated_avg=1, allocated_peak=1, busy_avg=1.0, profile="3g.20gb")
    add_tenant(c, "gpu-operator", allocated_avg=1, allocated_peak=1, busy_avg=0)
    return c


def read(c: Canned) -> tuple[dict, dict]:
    with fake_prometheus(c) as url:
        answers = Prometheus(url).query_all(queries(promql.Where()))
        return read_devices(answers), read_tenant_series(answers)


def test_devices_are_read_by_node_gpu_and_mig_instance_whatever_the_node_label() -> None:
    devices, _ = read(canned())
    by_name = {(d.node, d.name): d for d in devices.values()}
    assert set(by_name) == {("gpu-0", "0"), ("gpu-0", "1"), ("inference-0", "0"), ("training-0", "0/3g.20gb#1")}
    t4 = by_name["gpu-0", "0"]
    assert t4.values["sm_active"] == 12.0 and t4.values["gpu_util"] == 15.0 and t4.values["sm_active_avg"] == 10.0
    assert t4.model == "Tesla T4" and t4.pods == {("team-a", "train-1")}
    mig = by_name["training-0", "0/3g.20gb#1"]
    assert mig.mig_profile == "3g.20gb" and "gpu_util" not in mig.values and mig.resource == "nvidia.com/mig-3g.20gb"
    assert len(by_name["inference-0", "0"].pods) == 3


def test_every_query_reads_the_workload_from_exported_labels_where_a_scrape_renamed_them() -> None:
    where = promql.Where()
    for query in (promql.pods_now(where), promql.pods_over(where), promql.tenant_busy_avg(where),
                  promql.tenant_allocated_avg(where)):
        assert 'label_replace(' in query and '"pod", "$1", "exported_pod", "(.+)"' in query
        assert '"namespace", "$1", "exported_namespace", "(.+)"' in query
    tenant = promql.tenant_busy_avg(promql.Where(namespace="team-a"))
    assert 'exported_namespace="team-a"' in tenant and 'namespace="team-a",exported_namespace=""' in tenant


def test_top_marks_a_shared_gpu_and_never_splits_its_figures() -> None:
    devices, usage = read(canned())
    view = top_of(cluster(), devices, usage)
    rows = {(g["node"], g["gpu"], g["mig_profile"]): g for g in view["gpus"]}
    shared = rows["inference-0", 0, None]
    assert shared["attribution"] == "device" and shared["sm_active"] == 50.0
    assert shared["pods"] == ["team-a/serve-3", "team-b/serve-1", "team-b/serve-2"]
    assert rows["gpu-0", 0, None]["attribution"] == "pod"
    assert SHARED_NOTE in view["notes"] and "#307" in SHARED_NOTE


def test_the_exporters_own_pod_is_not_a_workload() -> None:
    devices, usage = read(canned())
    row = next(g for g in top_of(cluster(), devices, usage)["gpus"] if g["node"] == "gpu-0" and g["gpu"] == 1)
    assert row["pods"] == [] and row["attribution"] is None


def test_tenants_show_quota_requests_and_the_windows_use() -> None:
    devices, usage = read(canned())
    tenants = {t["tenant"]: t for t in top_of(cluster(), devices, usage)["tenants"]}
    assert set(tenants) == {"team-a", "team-b"}  # gpu-operator's series are no tenant's
    a, b = tenants["team-a"], tenants["team-b"]
    assert a["quota"] == {"nvidia.com/gpu": 4} and a["used"] == {"nvidia.com/gpu": 2}
    assert a["used_avg"] == {"nvidia.com/gpu": 1.5} and a["busy_avg"] == 0.35 and a["busy_pct"] == 23.3
    assert a["shared_gpus"] is True  # serve-3 shares inference-0 with team-b
    assert b["used"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}
    assert b["used_avg"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}


def test_filters_narrow_to_a_node_group_or_a_tenant() -> None:
    devices, usage = read(canned())
    by_group = top_of(cluster(), devices, usage, nodegroup="inference")
    assert [g["node"] for g in by_group["gpus"]] == ["inference-0"]
    by_tenant = top_of(cluster(), devices, usage, tenant="team-a")
    assert {g["node"] for g in by_tenant["gpus"]} == {"gpu-0", "inference-0"}
    assert [t["tenant"] for t in by_tenant["tenants"]] == ["team-a"]


def test_the_table_fits_80_columns_and_json_and_yaml_carry_the_same_data() -> None:
    c = canned()
    many = [(f"team-{i}", f"a-very-long-pod-name-{i:02d}-7f9c8d6b5-xk2p9") for i in range(9)]
    add_device(c, device("ip-10-0-123-234.eu-west-1.compute.internal", 3), sm=99.0, util=100.0, used=15000,
               total=T4_MIB, pods=many)
    devices, usage = read(c)
    view = {"prometheus": "http://127.0.0.1:9090", "window": "1h", **top_of(cluster(), devices, usage)}
    text = render_table(view)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "gpu-0 (node group gpu)" in text and "inference-0 (node group inference)" in text
    assert "3*: team-a/serve-3" in text and "9*: " in text and "+" in text
    assert "0/3g.20gb" in text and "10.0/19.6" in text
    assert "TENANT" in text and "team-a" in text
    assert json.loads(json.dumps(view)) == view
    assert yaml.safe_load(yaml.safe_dump(view, sort_keys=False)) == view


def test_no_series_says_so() -> None:
    view = top_of(cluster(), {}, {}, source="Prometheus at http://127.0.0.1:9")
    assert any("no dcgm-exporter series" in n for n in view["notes"])
    assert "no GPU series" in render_table({"window": "1h", **view})


def test_a_pod_with_gpus_by_claim_is_a_workload() -> None:
    """DRA: a pod's GPU is a ResourceClaim, not a request; it is no exporter for having no requests."""
    view = cluster()
    view.pods.append(PodInfo("team-a", "claimer", "gpu-0", "Running", {}, claims=True))
    assert view.workloads({("team-a", "claimer"), ("gpu-operator", "nvidia-dcgm-exporter-x7"),
                           ("team-a", "finished-long-ago")}) == {("team-a", "claimer"), ("team-a", "finished-long-ago")}


def test_pods_holding_devices_by_claim_are_shown_on_them_or_said_unplaceable() -> None:
    """DRA: the series name no pod; the claims do. A MIG device is placed by its GPU and profile only where
    the GPU has one instance of that profile."""
    from gpuctl.ops.metrics.gpu_metrics import ClaimedDevice, Device, attach_claimed

    def dev(gpu: str, uuid: str, profile: str | None = None, mig_id: str | None = None) -> Device:
        return Device("dra-0", gpu, uuid, "NVIDIA A100-SXM4-40GB", profile, mig_id)

    devices = {k: d for k, d in enumerate([dev("0", "GPU-a"), dev("1", "GPU-b", "3g.20gb", "2"),
                                           dev("1", "GPU-b", "2g.10gb", "3"), dev("1", "GPU-b", "2g.10gb", "4")])}
    notes = attach_claimed(devices, [
        ClaimedDevice("dra-0", "GPU-a", None, frozenset({("team-a", "train")})),
        ClaimedDevice("dra-0", "GPU-b", "3g.20gb", frozenset({("team-a", "infer-1"), ("team-b", "infer-2")})),
        ClaimedDevice("dra-0", "GPU-b", "2g.10gb", frozenset({("team-b", "small")})),
        ClaimedDevice("dra-0", "GPU-gone", None, frozenset({("team-b", "lost")}))])
    assert [sorted(d.pods) for d in devices.values()] == [
        [("team-a", "train")], [("team-a", "infer-1"), ("team-b", "infer-2")], [], []]
    assert notes == ["team-b/small holds a 2g.10gb MIG device of GPU GPU-b on dra-0 through a ResourceClaim; "
                     "the GPU has 2 2g.10gb instances and the series do not say which"]
    view = cluster()
    view.pods += [PodInfo("team-a", "train", "dra-0", "Running", {}, claims=True),
                  PodInfo("team-a", "by-request", "dra-0", "Running", {"nvidia.com/gpu": 1}, claims=True)]
    view.claimed += [ClaimedDevice("dra-0", "GPU-a", None, frozenset({("team-a", "train")})),
                     ClaimedDevice("dra-0", "GPU-b", "3g.20gb", frozenset({("team-a", "infer-1")})),
                     ClaimedDevice("dra-0", "GPU-c", None, frozenset({("team-a", "by-request")}))]
    found = top_of(view, devices, {})
    rows = found["gpus"]
    assert rows[0]["pods"] == ["team-a/train"] and rows[0]["attribution"] == "pod"
    # requests (train-1, serve-3, by-request: whose claimed GPU counts once, by its request) and the GPU and
    # 3g.20gb team-a's claims hold
    team = next(t for t in found["tenants"] if t["tenant"] == "team-a")
    assert team["used"] == {"nvidia.com/gpu": 3 + 1, "nvidia.com/mig-3g.20gb": 1}


def test_a_window_the_series_cover_in_part_or_not_yet_says_so() -> None:
    devices, usage = read(canned())
    assert coverage_note(Metrics(devices, usage, 1.0), "1h") is None
    assert "cover 40% of the 1h window" in str(coverage_note(Metrics(devices, usage, 0.4), "1h"))
    assert "follow within 15s" in str(coverage_note(Metrics(devices, usage, None), "1h"))  # Prometheus seconds old
    assert coverage_note(Metrics({}, {}, None), "1h") is None  # no series at all: top says that instead


def unhealthy_cluster() -> tuple[ClusterView, Canned]:
    """gpu-1 reports 1 of 4 GPUs unhealthy and DCGM's last XID on GPU 2 is 79 (fallen off the bus); gpu-2 reports
    one too, shared 4 ways (4 replicas), and no series has an XID; gpu-3 has an XID 13 (an application's, which
    the device plugin ignores) and reports nothing unhealthy."""
    nodes = {"gpu-1": NodeInfo("gpu-1", "gpu", GPUS["t4"], "none", 1, None, {"nvidia.com/gpu": 1}),
             "gpu-2": NodeInfo("gpu-2", "shared", GPUS["t4"], "time-slicing", 4, None, {"nvidia.com/gpu": 4}),
             "gpu-3": NodeInfo("gpu-3", "gpu", GPUS["t4"], "none", 1, None)}
    c = Canned()
    for i in range(4):
        add_device(c, device("gpu-1", i), sm=0.0, util=0.0, used=0, total=T4_MIB, xid=79 if i == 2 else 0)
    for i in range(2):
        add_device(c, device("gpu-2", i), sm=0.0, util=0.0, used=0, total=T4_MIB)  # no XID series
    add_device(c, device("gpu-3", 0), sm=0.0, util=0.0, used=0, total=T4_MIB, xid=13)
    return ClusterView(nodes, [], {}), c


def test_top_marks_the_gpu_the_node_reports_unhealthy_by_its_xid() -> None:
    view, c = unhealthy_cluster()
    devices, usage = read(c)
    found = top_of(view, devices, usage)
    health = {(g["node"], g["gpu"]): (g["health"], g["xid"]) for g in found["gpus"]}
    assert health == {("gpu-1", 0): ("healthy", 0), ("gpu-1", 1): ("healthy", 0), ("gpu-1", 2): ("unhealthy", 79),
                      ("gpu-1", 3): ("healthy", 0),
                      # the node's count, no GPU named: either may be the one
                      ("gpu-2", 0): ("unknown", None), ("gpu-2", 1): ("unknown", None),
                      ("gpu-3", 0): ("healthy", 13)}  # an XID the device plugin ignores marks nothing
    assert found["unhealthy"] == [
        {"node": "gpu-1", "nodegroup": "gpu", "unhealthy": {"nvidia.com/gpu": 1}, "unhealthy_gpus": 1, "unnamed": {}},
        {"node": "gpu-2", "nodegroup": "shared", "unhealthy": {"nvidia.com/gpu": 4}, "unhealthy_gpus": 1,
         "unnamed": {"nvidia.com/gpu": 1}}]
    assert UNHEALTHY_NOTE in found["notes"] and UNKNOWN_NOTE in found["notes"]
    assert top_of(view, devices, usage, nodegroup="gpu")["unhealthy"][0]["node"] == "gpu-1"
    text = render_table({"window": "1h", **found})
    assert max(len(line) for line in text.splitlines()) <= 80, text
    lines = text.splitlines()
    assert "gpu-1 (node group gpu): unhealthy 1 gpu" in lines and "gpu-2 (node group shared): unhealthy 4 gpu (1 GPU)" in lines
    assert lines[lines.index("gpu-1 (node group gpu): unhealthy 1 gpu") + 3].split()[0] == "2!", text
    assert [line.split()[0] for line in lines if line.startswith("  ")][4:6] == ["0?", "1?"], text


def test_an_unhealthy_node_without_series_is_still_shown() -> None:
    view, c = unhealthy_cluster()
    view.nodes["gpu-4"] = NodeInfo("gpu-4", "gpu", GPUS["t4"], "none", 1, None, {"nvidia.com/gpu": 2})
    devices, usage = read(c)
    found = top_of(view, devices, usage)
    assert found["unhealthy"][-1] == {"node": "gpu-4", "nodegroup": "gpu", "unhealthy": {"nvidia.com/gpu": 2},
                                      "unhealthy_gpus": 2, "unnamed": {"nvidia.com/gpu": 2}}
    assert "gpu-4 (node group gpu): unhealthy 2 gpu, no GPU series" in render_table({"window": "1h", **found})
