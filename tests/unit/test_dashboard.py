"""The Grafana dashboard `gpuctl render --out DIR` writes (gpuctl/ops/metrics/dashboard.py, Grafana's own SDK): its
queries are exactly those `gpuctl top` sends, per node group's GPU model and per tenant, and Grafana's SDK
reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl import api
from gpuctl.kube.prometheus import Prometheus
from gpuctl.ops.metrics.dashboard import FILE, WINDOW_VARIABLE, build_dashboard
from gpuctl.ops.metrics.gpu_metrics import read_metrics
from tests.conftest import run_gpuctl
from tests.unit.fake_prometheus import Canned, fake_prometheus

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "specs" / "good.yaml"


@pytest.fixture(scope="module")
def board() -> dict:
    return build_dashboard(api.to_platform(*api.load_spec(SPEC)))


def rows(board: dict) -> dict[str, list[str]]:
    """Row title -> the queries of its panels."""
    found: dict[str, list[str]] = {}
    title = ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            title = panel["title"]
            found[title] = []
        else:
            found[title] += [t["expr"] for t in panel["targets"]]
    return found


def top_queries() -> list[str]:
    """What `gpuctl top --since 1h` sends to Prometheus."""
    canned = Canned()
    with fake_prometheus(canned) as url:
        prom = Prometheus(url)
        read_metrics(prom, "1h")  # all top and advise read from Prometheus
    return canned.queries


# The expected PromQL, written out (not built with gpuctl.model.promql, the code under test).
BY = "Hostname, hostname, gpu, UUID, modelName, GPU_I_PROFILE, GPU_I_ID"
RELABEL = '"pod", "$1", "exported_pod", "(.+)"), "namespace", "$1", "exported_namespace", "(.+)"'


def device_queries(selector: str, window: str) -> list[str]:
    """A GPU row's panels, in panel order, for DCGM series matching `selector` ("" or '{modelName="..."}')."""
    return [
        f"100 * max by ({BY}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{selector})",
        f"max by ({BY}) (DCGM_FI_DEV_GPU_UTIL{selector})",
        f"max by ({BY}) (DCGM_FI_DEV_FB_USED{selector})",
        f"max by ({BY}) (DCGM_FI_DEV_FB_USED{selector}) + max by ({BY}) (DCGM_FI_DEV_FB_FREE{selector})",
        f"max by ({BY}) (DCGM_FI_DEV_XID_ERRORS{selector})",
        f"100 * avg_over_time((max by ({BY}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{selector}))[{window}])",
        f"100 * max_over_time((max by ({BY}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{selector}))[{window}])",
        f"avg_over_time((max by ({BY}) (DCGM_FI_DEV_GPU_UTIL{selector}))[{window}])",
        f"max_over_time((max by ({BY}) (DCGM_FI_DEV_GPU_UTIL{selector}))[{window}])",
        f"max_over_time((max by ({BY}) (DCGM_FI_DEV_FB_USED{selector}))[{window}])",
        f"count_over_time((max(DCGM_FI_DEV_FB_USED{selector}))[{window}]) / count_over_time(vector(1)[{window}])",
        f"group by ({BY}, pod, namespace) (label_replace(label_replace(DCGM_FI_DEV_FB_USED{selector}, {RELABEL}))",
        f"group by ({BY}, pod, namespace) (last_over_time((label_replace(label_replace("
        f"DCGM_FI_DEV_FB_USED{selector}, {RELABEL}))[{window}]))",
    ]


def tenant_queries(namespace: str, window: str) -> list[str]:
    def of(metric: str) -> str:
        return f'({metric}{{exported_namespace="{namespace}"}} or {metric}{{namespace="{namespace}",exported_namespace=""}})'

    held = (f"count by (namespace, GPU_I_PROFILE) (group by ({BY}, pod, namespace) "
            f"(label_replace(label_replace({of('DCGM_FI_DEV_FB_USED')}, {RELABEL})))")
    busy = (f"sum by (namespace) (max by ({BY}, namespace) "
            f"(label_replace(label_replace({of('DCGM_FI_PROF_GR_ENGINE_ACTIVE')}, {RELABEL})))")
    covered = f"on() group_left() count_over_time((max(DCGM_FI_DEV_FB_USED))[{window}])"
    return [f"sum_over_time(({held})[{window}]) / {covered}", f"max_over_time(({held})[{window}])",
            f"sum_over_time(({busy})[{window}]) / {covered}"]


def test_the_all_gpus_row_runs_exactly_tops_device_queries(board: dict) -> None:
    [all_gpus] = [queries for title, queries in rows(board).items() if title.startswith("All GPUs")]
    assert sorted(all_gpus) == sorted(device_queries("", WINDOW_VARIABLE))
    shown = sorted(q.replace(WINDOW_VARIABLE, "1h:15s") for q in all_gpus)  # the variable's value for 1h
    sent = top_queries()
    assert len(sent) == 16, sent  # top's 13 device queries and its 3 tenant ones
    assert shown == sorted(q for q in sent if "by (namespace" not in q)  # not the per-tenant sums
    assert len(shown) == len(set(shown)) == 13


def test_node_group_rows_select_their_gpu_model_and_name_the_groups(board: dict) -> None:
    by_title = rows(board)
    t4 = next(t for t in by_title if t.startswith("Tesla T4"))
    a100 = next(t for t in by_title if t.startswith("NVIDIA A100-SXM4-40GB"))
    assert "inference (time-slicing x4)" in t4 and "training (MIG 3g.20gb-2x2g.10gb)" in a100
    assert by_title[t4] == device_queries('{modelName="Tesla T4"}', "$window")
    assert by_title[a100] == device_queries('{modelName="NVIDIA A100-SXM4-40GB"}', "$window")


def test_tenant_rows_run_tops_tenant_queries_for_the_tenants_namespace(board: dict) -> None:
    by_title = rows(board)
    titles = [t for t in by_title if t.startswith("tenant ")]
    assert len(titles) == 2, titles
    for tenant in ("team-a", "team-b"):
        [title] = [t for t in titles if t.startswith(f"tenant {tenant} ")]
        assert by_title[title] == tenant_queries(tenant, "$window")
    assert "2 x 3g.20gb" in next(t for t in by_title if t.startswith("tenant team-b"))


def test_the_dashboard_is_one_grafana_reads(board: dict) -> None:
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    model = Dashboard.from_json(board)
    assert model.title == "gpuctl: GPUs of platform" and model.uid == "gpuctl-platform"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["window"]["current"] == {"selected": True, "text": "1h", "value": "1h:15s"}
    assert "1h : 1h:15s" in variables["window"]["query"] and "7d : 7d:42m" in variables["window"]["query"]
    assert variables["datasource"]["query"] == "prometheus"
    queried = [p for p in board["panels"] if p["type"] != "row"]
    assert queried, board["panels"]
    for panel in queried:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_render_writes_the_dashboard_beside_the_manifests(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("render", "-f", str(SPEC), "--out", str(tmp_path / "out"), env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "out" / "grafana" / FILE
    assert f"wrote {written}" in proc.stderr
    assert json.loads(written.read_text()) == build_dashboard(api.to_platform(*api.load_spec(SPEC)))
    stream = run_gpuctl("render", "-f", str(SPEC), env=isolated_env, timeout=60)
    assert stream.returncode == 0 and "grafana" not in stream.stdout  # `kubectl apply -f -` takes the stream
