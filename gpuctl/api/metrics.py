"""The GPUs at work and what their metrics call for, from Prometheus (gpuctl.ops.metrics: top, advise)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.api.reach import client
from gpuctl.kube.kubeconfig import current_context
from gpuctl.kube.prometheus import check_prometheus_url
from gpuctl.model.naming import check_name
from gpuctl.model.promql import parse_window
from gpuctl.model.target import DEFAULT_TARGET
from gpuctl.model.tenant import check_tenant_name
from gpuctl.ops.metrics.advise import advise as read_advice
from gpuctl.ops.metrics.advise import render_text
from gpuctl.ops.metrics.gpu_metrics import prometheus_for
from gpuctl.ops.metrics.top import render_table
from gpuctl.ops.metrics.top import top as read_top

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget


def _metrics_inputs(since: str, prometheus: str | None) -> str:
    """The window of `since` (a Prometheus duration), and `prometheus` judged as a URL, before any request."""
    window = parse_window(since, "--since")
    if prometheus is not None:
        check_prometheus_url(prometheus, "--prometheus")
    return window


def top(prometheus: str | None = None, since: str = "1h", nodegroup: str | None = None, tenant: str | None = None,
        target: ClusterTarget | None = None) -> dict[str, Any]:
    """The GPUs at work, from Prometheus (`prometheus`, else $GPUCTL_PROMETHEUS_URL, else a sim cluster's
    own): per node and GPU (and MIG instance) SM activity, utilisation, memory and pods; per tenant the GPUs
    held against its quota and how busy they were over `since` (gpuctl.ops.metrics.top)."""
    window = _metrics_inputs(since, prometheus)
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    if tenant is not None:
        check_tenant_name(tenant, "--tenant")
    kube = client(target)
    return read_top(kube, prometheus_for(kube, prometheus), window, nodegroup, tenant)


def top_table(view: dict[str, Any], width: int = 80) -> str:
    """`top`'s view as text at most `width` columns wide."""
    return render_table(view, width)


def advise(prometheus: str | None = None, since: str = "1h", target: ClusterTarget | None = None) -> dict[str, Any]:
    """Concrete changes the window's metrics call for, each with its figures and the command that applies it
    (gpuctl.ops.metrics.advise); changes nothing."""
    target = target or DEFAULT_TARGET
    window = _metrics_inputs(since, prometheus)
    kube = client(target)
    return read_advice(kube, prometheus_for(kube, prometheus), window,
                       target.context or current_context(target.kubeconfig))


def advice_text(result: dict[str, Any]) -> str:
    """`advise`'s result as numbered paragraphs ("nothing to advise" when there is none)."""
    return render_text(result)
