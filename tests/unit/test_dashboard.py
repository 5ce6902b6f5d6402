"""The Grafana dashboard `gpuctl render --out DIR` writes (gpuctl/ops/dashboard.py, Grafana's own SDK): its
queries are exactly those `gpuctl top` sends, per node group's GPU model and per tenant, and Grafana's SDK
reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl import api
from gpuctl.kube.prometheus import Prometheus
from gpuctl.model import promql
from gpuctl.ops.dashboard import FILE, TENANT_PANELS, WINDOW_VARIABLE, build_dashboard, panel_queries
from gpuctl.ops.gpu_metrics import read_metrics
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


def test_the_all_gpus_row_runs_exactly_tops_device_queries(board: dict) -> None:
    [all_gpus] = [queries for title, queries in rows(board).items() if title.startswith("All GPUs")]
    shown = sorted(q.replace(WINDOW_VARIABLE, "1h:15s") for q in all_gpus)  # the variable's value for 1h
    sent = top_queries()
    tenant_queries = {build(promql.Where(window="1h")) for build in promql.TENANT_WINDOW.values()}
    assert shown == sorted(q for q in sent if q not in tenant_queries)
    assert len(shown) == len(set(shown)) == 12


def test_node_group_rows_select_their_gpu_model_and_name_the_groups(board: dict) -> None:
    by_title = rows(board)
    t4 = next(t for t in by_title if t.startswith("Tesla T4"))
    a100 = next(t for t in by_title if t.startswith("NVIDIA A100-SXM4-40GB"))
    assert "inference (time-slicing x4)" in t4 and "training (MIG 3g.20gb-2x2g.10gb)" in a100
    where = promql.Where(window=WINDOW_VARIABLE, model="Tesla T4")
    assert by_title[t4] == panel_queries(where)
    assert sorted(by_title[t4]) == sorted(build(where) for build in (*promql.DEVICE_NOW.values(),
                                                                     *promql.DEVICE_WINDOW.values(),
                                                                     promql.coverage, promql.pods_now,
                                                                     promql.pods_over))
    assert all('modelName="Tesla T4"' in q for q in by_title[t4])


def test_tenant_rows_run_tops_tenant_queries_for_the_tenants_namespace(board: dict) -> None:
    by_title = rows(board)
    for tenant in ("team-a", "team-b"):
        [title] = [t for t in by_title if t.startswith(f"tenant {tenant} ")]
        where = promql.Where(window=WINDOW_VARIABLE, namespace=tenant)
        assert by_title[title] == [build(where) for _, build, _, _ in TENANT_PANELS]
        assert sorted(by_title[title]) == sorted(b(where) for b in promql.TENANT_WINDOW.values())
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
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_render_writes_the_dashboard_beside_the_manifests(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("render", "-f", str(SPEC), "--out", str(tmp_path / "out"), env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "out" / "grafana" / FILE
    assert f"wrote {written}" in proc.stderr
    assert json.loads(written.read_text()) == build_dashboard(api.to_platform(*api.load_spec(SPEC)))
    stream = run_gpuctl("render", "-f", str(SPEC), env=isolated_env, timeout=60)
    assert stream.returncode == 0 and "grafana" not in stream.stdout  # `kubectl apply -f -` takes the stream
