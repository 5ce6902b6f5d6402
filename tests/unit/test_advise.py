"""`gpuctl advise` (gpuctl/ops/metrics/advise.py) on dcgm-exporter-shaped answers from a FAKE Prometheus on 127.0.0.1
(canned answers: tests/unit/fake_prometheus.py) and a cluster given as data: each rule's advice, the figures
behind it and the command that applies it, and nothing where nothing is called for."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, cast

from gpuctl.kube.kube import Kube
from gpuctl.kube.prometheus import Prometheus
from gpuctl.model import promql
from gpuctl.model.catalog import GPUS
from gpuctl.model.mig import parse_layout, place
from gpuctl.model.sharing import Sharing
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.model.taints import Taint
from gpuctl.ops.metrics.advise import NOTHING, advice_of, cluster_identity, render_text, unhealthy_note
from gpuctl.ops.metrics.gpu_metrics import (
    ClusterView,
    NodeInfo,
    PodInfo,
    TenantInfo,
    queries,
    read_devices,
    read_tenant_series,
)
from tests.unit.fake_prometheus import Canned, add_device, add_tenant, device, fake_prometheus

T4 = GPUS["t4"]
A100 = GPUS["a100-40gb"]
T4_MIB = 15360
IDENTITY = ("sim", "demo")


def run(canned: Canned, view: ClusterView, records: dict[str, GroupPlan]) -> list[dict[str, Any]]:
    with fake_prometheus(canned) as url:
        answers = Prometheus(url).query_all(queries(promql.Where()))
        devices, usage = read_devices(answers), read_tenant_series(answers)
    return advice_of(view, records, devices, usage, "1h", IDENTITY)


def whole_t4s(n: int = 4) -> tuple[ClusterView, dict[str, GroupPlan]]:
    nodes = {f"gpu-{i}": NodeInfo(f"gpu-{i}", "gpu", T4, "none", 1, None) for i in range(n)}
    pods = [PodInfo("team-a", f"job-{i}", f"gpu-{i}", "Running", {"nvidia.com/gpu": 1}) for i in range(n)]
    return ClusterView(nodes, pods, {}), {"gpu": GroupPlan(NodeGroupSpec("gpu", T4, n, 1))}


def test_four_whole_t4s_at_10_percent_are_to_be_shared_with_the_flag_to_pass() -> None:
    """The issue's example: 4 whole T4s each at 10% for the window, 2 GiB used at most."""
    canned = Canned()
    for i in range(4):
        add_device(canned, device(f"gpu-{i}"), sm=8.0, util=10.0, used=2048, total=T4_MIB,
                   pods=[("team-a", f"job-{i}")])
    view, records = whole_t4s()
    [advice] = run(canned, view, records)
    assert advice["rule"] == "share-idle-gpus" and advice["nodegroup"] == "gpu"
    figures = advice["figures"]
    # N <= floor(100 / 10%) = 10, N x 2 GiB <= 15 GiB -> 7, within the device plugin's 64
    assert (figures["by_util"], figures["by_memory"], figures["slices"]) == (10, 7, 7)
    assert figures["peak_util_pct"] == 10.0 and figures["gpus"] == 4
    assert advice["command"] == ("gpuctl cluster create --cloud sim --name demo --nodegroup-name gpu --gpu t4 "
                                 "--nodes 4 --slices 7")
    assert "timeSlicing: {replicas: 7}" in advice["alternative"]
    text = render_text({"advice": [advice]})
    assert "peaked at 10%" in text and "apply: gpuctl cluster create" in text and "--slices 7" in text


def test_the_sharing_command_keeps_the_groups_taints_and_gpus_per_node() -> None:
    canned = Canned()
    add_device(canned, device("gpu-0"), sm=0.5, util=1.0, used=100, total=T4_MIB, pods=[("team-a", "job-0")])
    view, _ = whole_t4s(1)
    taints = (Taint("nvidia.com/gpu", "true", "NoSchedule"), Taint("dedicated", "ml", "NoSchedule"))
    records = {"gpu": GroupPlan(NodeGroupSpec("gpu", T4, 1, 2, taints=taints))}
    [advice] = run(canned, view, records)
    words = shlex.split(advice["command"])
    assert "--gpus-per-node" in words and words[words.index("--gpus-per-node") + 1] == "2"
    assert [words[i + 1] for i, w in enumerate(words) if w == "--taint"] == [str(t) for t in taints]
    assert advice["figures"]["slices"] == 64  # 1% and 100 MiB: the device plugin's most replicas bound it


def test_a_busy_or_memory_hungry_whole_gpu_is_left_alone() -> None:
    for util, used in ((45.0, 1024), (10.0, 9000)):
        canned = Canned()
        add_device(canned, device("gpu-0"), sm=util, util=util, used=used, total=T4_MIB, pods=[("team-a", "job-0")])
        view, records = whole_t4s(1)
        assert run(canned, view, records) == [], (util, used)


def test_an_idle_gpu_nobody_holds_is_free_capacity_not_advice() -> None:
    canned = Canned()
    add_device(canned, device("gpu-0"), sm=0.0, util=0.0, used=0, total=T4_MIB)
    view, records = whole_t4s(1)
    assert run(canned, view, records) == []


def test_a_time_sliced_gpu_at_50_percent_with_3_pods_needs_nothing() -> None:
    """The issue's second example: neither idle (it is shared already) nor saturated."""
    canned = Canned()
    add_device(canned, device("inference-0"), sm=48.0, util=50.0, used=9216, total=T4_MIB,
               pods=[("team-a", "a"), ("team-a", "b"), ("team-b", "c")])
    view = ClusterView({"inference-0": NodeInfo("inference-0", "inference", T4, "time-slicing", 4, None)}, [], {})
    records = {"inference": GroupPlan(NodeGroupSpec("inference", T4, 1, 1), Sharing("time-slicing", 4))}
    assert run(canned, view, records) == []
    assert render_text({"advice": []}) == NOTHING == "nothing to advise"


def test_a_saturated_time_sliced_group_gets_mps_or_fewer_replicas() -> None:
    canned = Canned()
    add_device(canned, device("inference-0"), sm=90.0, util=97.0, used=12000, total=T4_MIB,
               pods=[("team-a", "a"), ("team-a", "b"), ("team-b", "c"), ("team-b", "d")])
    view = ClusterView({"inference-0": NodeInfo("inference-0", "inference", T4, "time-slicing", 4, None)}, [], {})
    records = {"inference": GroupPlan(NodeGroupSpec("inference", T4, 1, 1), Sharing("time-slicing", 4))}
    [advice] = run(canned, view, records)
    assert advice["rule"] == "saturated-sharing"
    assert advice["figures"] == {"gpus": 1, "avg_util_pct": 97.0, "replicas": 4, "most_pods_on_a_gpu": 4,
                                 "fewer_replicas": 2}
    assert advice["command"].endswith("--nodegroup-name inference --gpu t4 --nodes 1 --sharing mps --slices 4")
    assert advice["alternative"].endswith("--slices 2")


def test_idle_mig_instances_and_pending_pods_of_another_profile_give_a_layout_that_fits() -> None:
    """A100s laid out 3g.20gb-2x2g.10gb: the 2g.10gb instances sit idle, pods asking for 1g.5gb are Pending."""
    canned = Canned()
    nodes, pods = {}, []
    for n in range(2):
        node = f"training-{n}"
        nodes[node] = NodeInfo(node, "training", A100, "none", 1, "3g.20gb-2x2g.10gb")
        add_device(canned, device(node, 0, "NVIDIA A100-SXM4-40GB", mig=("3g.20gb", 1)), sm=60.0, util=None,
                   used=12000, total=20096, pods=[("team-b", f"big-{n}")])
        pods.append(PodInfo("team-b", f"big-{n}", node, "Running", {"nvidia.com/mig-3g.20gb": 1}))
        for instance in (5, 6):
            add_device(canned, device(node, 0, "NVIDIA A100-SXM4-40GB", mig=("2g.10gb", instance)), sm=0.0,
                       util=None, used=0, total=9856)
    pods += [PodInfo("team-a", f"small-{i}", None, "Pending", {"nvidia.com/mig-1g.5gb": 1}) for i in range(5)]
    layout = parse_layout("3g.20gb-2x2g.10gb", A100)
    records = {"training": GroupPlan(NodeGroupSpec("training", A100, 2, 1), mig=layout)}
    [advice] = run(canned, ClusterView(nodes, pods, {}), records)
    assert advice["rule"] == "mig-layout"
    proposed = advice["figures"]["proposed"]
    assert advice["command"] == f"gpuctl mig apply {proposed} --nodegroup training"
    # keeps the busy 3g.20gb, gives each GPU ceil(5 pending / 2 GPUs) = 3 x 1g.5gb, and gpuctl can place it
    assert proposed == "3g.20gb-3x1g.5gb"
    assert place(parse_layout(proposed, A100).profiles, A100)
    assert advice["figures"]["idle_instances"] == {"2g.10gb": 4}
    assert advice["figures"]["pending_pods"] == {"1g.5gb": 5}


def test_mig_without_pending_demand_needs_nothing() -> None:
    canned = Canned()
    add_device(canned, device("training-0", 0, "NVIDIA A100-SXM4-40GB", mig=("3g.20gb", 1)), sm=0.0, util=None,
               used=0, total=20096)
    view = ClusterView({"training-0": NodeInfo("training-0", "training", A100, "none", 1, "all-3g.20gb")}, [], {})
    records = {"training": GroupPlan(NodeGroupSpec("training", A100, 1, 1), mig=parse_layout("all-3g.20gb", A100))}
    assert run(canned, view, records) == []


def test_a_mostly_unused_tenant_quota_is_lowered_keeping_the_tenants_other_flags() -> None:
    canned = Canned()
    add_tenant(canned, "team-a", allocated_avg=1.2, allocated_peak=2, busy_avg=0.4)
    add_tenant(canned, "team-b", allocated_avg=3.5, allocated_peak=4, busy_avg=2.0)
    queue = {"spec": {"cohortName": "research", "resourceGroups": [{"flavors": [{"name": "gpuctl-t4", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 2, "lendingLimit": 4}]}]}]}}
    tenants = {"team-a": TenantInfo("team-a", {"nvidia.com/gpu": 10, "nvidia.com/mig-3g.20gb": 4}, "team-a-devs",
                                    queue),
               "team-b": TenantInfo("team-b", {"nvidia.com/gpu": 4}, None, None)}
    pods = [PodInfo("team-a", "x", "gpu-0", "Running", {"nvidia.com/gpu": 1})]
    [advice] = run(canned, ClusterView({}, pods, tenants), {})
    assert advice["rule"] == "unused-quota" and advice["tenant"] == "team-a"
    # nominal quota 10 - 2 borrowed = 8; held 1.2 on average (<= 25%), 2 at most -> 2; its 2 x 3g.20gb (4 - 2
    # borrowed) unused -> 1, the least a quota the tenant has is lowered to
    assert advice["figures"]["quota"] == {"nvidia.com/gpu": 8, "nvidia.com/mig-3g.20gb": 2}
    assert advice["figures"]["proposed"] == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}
    assert advice["command"] == ("gpuctl tenant add team-a --gpus 2 --mig 3g.20gb=1 --group team-a-devs --borrow 2 "
                                 "--lend 4 --cohort research")
    assert re.search(r"quota 8, held 1\.20 on average", " ".join(advice["why"]))


def test_cluster_identity_from_gpuctls_context_names(isolated_env: dict[str, str],
                                                     monkeypatch: Any) -> None:
    monkeypatch.setenv("GPUCTL_STATE_DIR", isolated_env["GPUCTL_STATE_DIR"])
    assert cluster_identity("https://127.0.0.1:1", "gpuctl-eks-ml") == ("eks", "ml")
    assert cluster_identity("https://127.0.0.1:1", "gpuctl-openstack-a-b") == ("openstack", "a-b")
    assert cluster_identity("https://127.0.0.1:1", "someones-context") == ("CLOUD", "CLUSTER")


def test_the_advised_commands_are_ones_gpuctl_accepts(isolated_env: dict[str, str]) -> None:
    """`cluster create ... --export-spec` judges the advised command line whole, offline; `mig validate` the
    layout on the GPU's geometry."""
    from tests.conftest import run_gpuctl

    canned = Canned()
    for i in range(4):
        add_device(canned, device(f"gpu-{i}"), sm=8.0, util=10.0, used=2048, total=T4_MIB,
                   pods=[("team-a", f"job-{i}")])
    view, records = whole_t4s()
    [share] = run(canned, view, records)
    proc = run_gpuctl(*shlex.split(share["command"])[1:], "--export-spec", env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "replicas: 7" in proc.stdout and "name: gpu" in proc.stdout
    proc = run_gpuctl("mig", "validate", "3g.20gb-3x1g.5gb", "--gpu", "a100-40gb", env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_devices_held_by_claim_are_left_out_of_the_sharing_rules_and_it_says_so() -> None:
    from gpuctl.ops.metrics.advise import claims_note
    from gpuctl.ops.metrics.gpu_metrics import ClaimedDevice

    view = ClusterView({}, [], {})
    assert claims_note(view) is None
    view.claimed.append(ClaimedDevice("dra-0", "GPU-a", None, frozenset({("team-a", "train")})))
    note = claims_note(view)
    assert note is not None and note.startswith("1 device held through ResourceClaims (DRA)")
    assert "not with --slices" in note


# -- the coverage gate: no advice from a window Prometheus covers less than 90 % of ------------------------

NOW = datetime(2026, 11, 26, 16, 30, tzinfo=timezone.utc)


def _tenant_left_idle(coverage: float | None) -> tuple[Canned, ClusterView]:
    """The issue's case: a tenant made a minute ago holds nothing yet; Prometheus covers `coverage` of 1h."""
    canned = Canned()
    add_tenant(canned, "team-a", allocated_avg=0.0, allocated_peak=0, busy_avg=0.0)
    if coverage is not None:
        canned.add(promql.coverage(promql.Where()), {}, coverage)
    view = ClusterView({}, [], {"team-a": TenantInfo("team-a", {"nvidia.com/gpu": 4}, None, None)})
    return canned, view


def _advise(canned: Canned, view: ClusterView, monkeypatch: Any) -> dict[str, Any]:
    """ops.advise.advise on the fake Prometheus, the cluster given as data (its reads replaced)."""
    from types import SimpleNamespace

    from gpuctl.ops.metrics import advise as ops_advise
    from gpuctl.ops.metrics import gpu_metrics

    monkeypatch.setattr(gpu_metrics, "read_cluster", lambda client: view)
    monkeypatch.setattr(ops_advise, "read_queues", lambda client, v: None)
    monkeypatch.setattr(ops_advise, "recorded_groups", lambda client: {})
    monkeypatch.setattr(ops_advise, "cluster_identity", lambda server, context: IDENTITY)
    client = cast(Kube, SimpleNamespace(server="https://127.0.0.1:1"))  # Kube.server
    with fake_prometheus(canned) as url:
        return ops_advise.advise(client, Prometheus(url), "1h", now=NOW)


def test_a_window_covered_1_7_percent_gives_no_advice_but_when_it_can_follow(monkeypatch: Any) -> None:
    result = _advise(*_tenant_left_idle(60 / 3600), monkeypatch)
    assert result["advice"] == []
    gate = result["withheld"]
    assert (gate["covered_s"], gate["window_s"], gate["coverage_pct"], gate["needed_pct"]) == (60, 3600, 1.7, 90)
    assert gate["ready_at"] == "2026-11-26T17:23:00Z" and gate["ready_in_s"] == 3240 - 60  # 90 % of 1h = 54m
    assert gate["since"] == "1m"  # 1m of series covers a 1m window
    text = render_text(result)
    assert text.splitlines() == [
        "no advice yet: Prometheus has 1m of the 1h window (1.7 %); advice needs 90 % of it",
        "advice from the 1h window can follow at 2026-11-26 17:23:00 UTC (in 53m), or now with --since 1m"]
    assert "apply:" not in text and "held 0.00" not in text


def test_too_little_for_even_a_1m_window_says_when_that_one_follows(monkeypatch: Any) -> None:
    result = _advise(*_tenant_left_idle(0.004), monkeypatch)  # the 0.4 %: 14 s of 1h
    assert result["advice"] == [] and result["withheld"]["since"] is None
    assert render_text(result).splitlines()[1].endswith("(in 53m46s), or with --since 1m in 40s")


def test_no_gpu_series_at_all_gives_no_advice_and_no_made_up_time(monkeypatch: Any) -> None:
    result = _advise(*_tenant_left_idle(None), monkeypatch)
    assert result["advice"] == [] and result["withheld"]["ready_at"] is None
    assert "Prometheus has no GPU series in the 1h window (0.0 %)" in render_text(result)


def test_a_window_covered_90_percent_gives_its_advice_unchanged(monkeypatch: Any) -> None:
    result = _advise(*_tenant_left_idle(0.9), monkeypatch)
    assert result["withheld"] is None
    [advice] = result["advice"]
    assert advice["rule"] == "unused-quota" and advice["command"] == "gpuctl tenant add team-a --gpus 1"
    assert render_text(result).startswith("1. tenant team-a: lower its quota")


def test_an_unhealthy_gpu_is_not_idle_capacity_to_share() -> None:
    """4 whole T4s held and idle; gpu-3 reports its GPU unhealthy (capacity 1, allocatable 0) and DCGM's last XID
    there is 79: the pod on it is stuck, not idle. The advice counts 3 GPUs and says which it left out."""
    canned = Canned()
    for i in range(4):
        add_device(canned, device(f"gpu-{i}"), sm=8.0, util=10.0, used=2048, total=T4_MIB,
                   pods=[("team-a", f"job-{i}")], xid=79 if i == 3 else 0)
    view, records = whole_t4s()
    view.nodes["gpu-3"] = NodeInfo("gpu-3", "gpu", T4, "none", 1, None, {"nvidia.com/gpu": 1})
    [advice] = run(canned, view, records)
    assert advice["figures"]["gpus"] == 3 and advice["figures"]["unhealthy_left_out"] == 1
    assert advice["why"][-1].endswith(": gpu-3 GPU 0") and "3 whole GPUs held" in advice["why"][0]
    with fake_prometheus(canned) as url:
        devices = read_devices(Prometheus(url).query_all(queries(promql.Where())))
    note = unhealthy_note(view, devices)
    assert note is not None and note.endswith("gpu-3 GPU 0 (XID 79)") and "not idle capacity" in note
    assert "note: " + note in render_text({"advice": [advice], "notes": [note]})


def test_an_unhealthy_mig_instance_is_not_an_idle_one_to_lay_out_again() -> None:
    """An A100 as 3g.20gb-2x2g.10gb, its 3g.20gb busy, both 2g.10gb instances without a pod but unhealthy (the
    node's count, no XID series to name them: both left out), pods asking for 1g.5gb Pending: no idle instance,
    so no new layout from idleness that is a failure."""
    canned = Canned()
    node = NodeInfo("training-0", "training", A100, "none", 1, "3g.20gb-2x2g.10gb", {"nvidia.com/mig-2g.10gb": 2})
    add_device(canned, device(node.name, 0, "NVIDIA A100-SXM4-40GB", mig=("3g.20gb", 1)), sm=60.0, util=None,
               used=12000, total=20096, pods=[("team-b", "big")])
    for instance in (5, 6):
        add_device(canned, device(node.name, 0, "NVIDIA A100-SXM4-40GB", mig=("2g.10gb", instance)), sm=0.0,
                   util=None, used=0, total=9856)
    pods = [PodInfo("team-b", "big", node.name, "Running", {"nvidia.com/mig-3g.20gb": 1}),
            *(PodInfo("team-a", f"small-{i}", None, "Pending", {"nvidia.com/mig-1g.5gb": 1}) for i in range(3))]
    records = {"training": GroupPlan(NodeGroupSpec("training", A100, 1, 1),
                                     mig=parse_layout("3g.20gb-2x2g.10gb", A100))}
    healthy = ClusterView({node.name: replace(node, unhealthy={})}, pods, {})
    assert [a["rule"] for a in run(canned, healthy, records)] == ["mig-layout"]  # the same devices, healthy
    assert run(canned, ClusterView({node.name: node}, pods, {}), records) == []
