"""gpuctl's operations, for the tests: the metrics' pure halves (read, top, advise), render, the tenants' grants."""

from __future__ import annotations

from gpuctl.ops.metrics.advise import advice_of
from gpuctl.ops.metrics.gpu_metrics import ClusterView, NodeInfo, PodInfo, TenantInfo, read_metrics
from gpuctl.ops.metrics.top import top_of
from gpuctl.ops.render import manifests
from gpuctl.ops.tenancy.default_queue import wait_default_queue_in_force
from gpuctl.ops.tenancy.tenants import granted

__all__ = ["ClusterView", "NodeInfo", "PodInfo", "TenantInfo", "advice_of", "granted", "manifests", "read_metrics",
           "top_of", "wait_default_queue_in_force"]
