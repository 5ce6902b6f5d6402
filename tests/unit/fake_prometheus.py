"""A FAKE Prometheus for unit tests: Prometheus's HTTP API (/api/v1/query) on 127.0.0.1 with real sockets, answering
canned vectors keyed by the exact query text. It evaluates no PromQL: what the queries mean is checked against
Prometheus's own engine in tests/conformance/test_promql_engine.py. Any other query answers an empty vector;
every query is recorded, so a test can hold them to the dashboard's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from gpuctl.model import promql
from tests.unit.local_servers import http_server


@dataclass
class Canned:
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # query -> vector
    status: int = 200
    body: bytes | None = None  # a raw answer for every request instead (errors, non-Prometheus servers)
    queries: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def add(self, query: str, labels: dict[str, str], value: float) -> None:
        self.answers.setdefault(query, []).append({"metric": labels, "value": [1700000000.0, repr(float(value))]})


@contextmanager
def fake_prometheus(canned: Canned) -> Iterator[str]:
    """http://127.0.0.1:PORT of a fake Prometheus answering from `canned`."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            self._answer(form.get("query", [""])[0])

        def do_GET(self) -> None:
            self._answer(parse_qs(self.path.partition("?")[2]).get("query", [""])[0])

        def _answer(self, query: str) -> None:
            canned.queries.append(query)
            canned.headers.append(dict(self.headers))
            if canned.body is not None:
                body = canned.body
            elif not self.path.startswith(("/api/v1/query", "/prefix/api/v1/query")):
                body, canned.status = b"404 page not found", 404
            else:
                body = json.dumps({"status": "success", "data": {
                    "resultType": "vector", "result": canned.answers.get(query, [])}}).encode()
            self.send_response(canned.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with http_server(Handler) as url:
        yield url


# -- dcgm-exporter-shaped answers of gpuctl's queries ------------------------------------------------------

def device(node: str, gpu: int = 0, model: str = "Tesla T4", mig: tuple[str, int] | None = None,
           node_label: str = "Hostname") -> dict[str, str]:
    """The labels a device's series keep after `max by (DEVICE_LABELS)`: dcgm-exporter's, `Hostname` (up to
    4.5.3-4.8.2) or `hostname` (after #655)."""
    labels = {node_label: node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "modelName": model}
    if mig is not None:
        labels.update({"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])})
    return labels


def add_device(canned: Canned, labels: dict[str, str], *, sm: float, util: float | None, used: float, total: float,
               pods: Sequence[tuple[str, str]] = (), sm_avg: float | None = None, sm_peak: float | None = None,
               util_avg: float | None = None, util_peak: float | None = None, used_peak: float | None = None,
               pods_window: list[tuple[str, str]] | None = None, window: str = "1h", xid: int | None = None) -> None:
    """One device's answers to every device query (percentages as gpuctl's queries give them); DCGM's last XID
    where `xid` is given."""
    where = promql.Where(window=window)
    canned.add(promql.sm_active_now(where), labels, sm)
    canned.add(promql.fb_used_now(where), labels, used)
    canned.add(promql.fb_total_now(where), labels, total)
    if xid is not None:
        canned.add(promql.xid_now(where), labels, xid)
    canned.add(promql.sm_active_avg(where), labels, sm if sm_avg is None else sm_avg)
    canned.add(promql.sm_active_peak(where), labels, sm if sm_peak is None else sm_peak)
    canned.add(promql.fb_used_peak(where), labels, used if used_peak is None else used_peak)
    if util is not None:  # a MIG instance has no DCGM_FI_DEV_GPU_UTIL
        canned.add(promql.gpu_util_now(where), labels, util)
        canned.add(promql.gpu_util_avg(where), labels, util if util_avg is None else util_avg)
        canned.add(promql.gpu_util_peak(where), labels, util if util_peak is None else util_peak)
    for query, seen in ((promql.pods_now(where), pods), (promql.pods_over(where), pods if pods_window is None
                                                                                  else pods_window)):
        for namespace, pod in seen:
            canned.add(query, {**labels, "namespace": namespace, "pod": pod}, 1)


def add_tenant(canned: Canned, namespace: str, *, allocated_avg: float, allocated_peak: float, busy_avg: float,
               profile: str | None = None, window: str = "1h") -> None:
    where = promql.Where(window=window)
    labels = {"namespace": namespace, **({"GPU_I_PROFILE": profile} if profile else {})}
    canned.add(promql.tenant_allocated_avg(where), labels, allocated_avg)
    canned.add(promql.tenant_allocated_peak(where), labels, allocated_peak)
    canned.add(promql.tenant_busy_avg(where), {"namespace": namespace}, busy_avg)
