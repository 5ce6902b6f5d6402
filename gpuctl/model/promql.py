"""The PromQL of `gpuctl top`, `gpuctl advise` and the Grafana dashboard: one builder per query, so that
the dashboard shows exactly what the commands read.

The series are NVIDIA dcgm-exporter's (4.x, as the GPU Operator v26.7.0 ships it: 4.6.0-4.8.3), from its
default counters (etc/default-counters.csv) and its metric template (internal/pkg/rendermetrics):

- DCGM_FI_PROF_GR_ENGINE_ACTIVE: ratio (0-1) of time the graphics engine was active, also per MIG instance;
- DCGM_FI_DEV_GPU_UTIL: percent of time a kernel ran; not reported for MIG instances;
- DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE: framebuffer MiB (used + free: the total less what the driver
  reserves).
- DCGM_FI_DEV_XID_ERRORS: the value of the last XID error the GPU raised (0: none), also per MIG instance.

Labels of each series: gpu (index on the node), UUID, pci_bus_id, device, modelName (NVML's name, e.g.
"Tesla T4"), Hostname (the node: NODE_NAME; spelled `hostname` after dcgm-exporter #655, both are read),
GPU_I_PROFILE and GPU_I_ID on a MIG instance, and pod, namespace, container of the pod using the device. With
several pods on one device (time-slicing, MPS) dcgm-exporter gives one of them, or with
KUBERNETES_VIRTUAL_GPUS one series per pod carrying the device's value (dcgm-exporter #307): a device's
figures are never a pod's. A Prometheus scraping through a ServiceMonitor with honorLabels false (the GPU
Operator's default) renames those to exported_pod, exported_namespace, exported_container and puts the
exporter's own pod in pod/namespace (dcgm-exporter #340): every query here takes the workload's from
exported_* where present.

Every figure of a device is the max over its series (the copies per pod carry the same value); figures over
a window are subqueries of that max, so a device whose pods came and went is averaged over the whole window
once; their step is a 240th of the window, at least MIN_STEP_S (a fresh window has figures after 15 s).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpuctl.util.errors import UsageError, shown

SM_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
NODE_LABELS = ("Hostname", "hostname")  # dcgm-exporter up to 4.5.3-4.8.2 / after #655
DEVICE_LABELS = ("Hostname", "hostname", "gpu", "UUID", "modelName", "GPU_I_PROFILE", "GPU_I_ID")
WORKLOAD_LABELS = ("pod", "namespace")  # after _workload: the pod's, whatever the scrape set-up
MIN_STEP_S = 15  # the subqueries' finest step: the GPU Operator's scrape interval
STEPS = 240  # samples per series of a subquery over the window
DEFAULT_WINDOW = "1h"
_DURATION = re.compile(r"(?:[0-9]+[smhdw])+")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
MIN_WINDOW_S = 60
MAX_WINDOW_S = 90 * 86400


def parse_window(text: str, field: str = "--since") -> str:
    """A window as Prometheus writes durations (`30m`, `1h`, `1h30m`, `7d`), 1m to 90d, in its shortest
    form; else a UsageError naming `field`."""
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise UsageError(field, f"{shown(text)} is not a duration", "write e.g. 15m, 1h, 6h or 7d")
    seconds = sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)([smhdw])", value))
    if not MIN_WINDOW_S <= seconds <= MAX_WINDOW_S:
        raise UsageError(field, f"{shown(text)} is outside 1m to 90d", "write e.g. 15m, 1h, 6h or 7d")
    return duration_text(seconds)


def duration_text(seconds: int) -> str:
    """`seconds` as a Prometheus duration, largest units first (5400 -> 1h30m)."""
    parts = []
    for unit, size in _UNITS.items():
        if unit != "w" and seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def window_seconds(window: str) -> int:
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)([smhdw])", window))


def window_range(window: str) -> str:
    """The subquery range of a window: `1h:15s` (window:step, the step a STEPS-th of it, at least MIN_STEP_S)."""
    return f"{window}:{duration_text(max(MIN_STEP_S, -(-window_seconds(window) // STEPS)))}"


@dataclass(frozen=True)
class Where:
    """Which series a query reads: all, those of one GPU model (dcgm-exporter's modelName), or those of the
    pods of one namespace (a tenant), over `window`: a duration, or a Grafana variable (`$window`) whose value
    is a whole subquery range (window_range)."""

    window: str = DEFAULT_WINDOW
    model: str | None = None
    namespace: str | None = None

    @property
    def range(self) -> str:
        return self.window if self.window.startswith("$") else window_range(self.window)


def _quote(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal: Go's escapes, which JSON's are


def _series(metric: str, where: Where) -> str:
    """The series of `metric` that `where` selects, the workload's pod and namespace in `pod`/`namespace`."""
    model = [f"modelName={_quote(where.model)}"] if where.model is not None else []
    if where.namespace is None:
        selected = metric + (f"{{{','.join(model)}}}" if model else "")
    else:  # the workload's namespace: exported_namespace where the scrape renamed it, else namespace
        ns = _quote(where.namespace)
        exported = ",".join([*model, f"exported_namespace={ns}"])
        plain = ",".join([*model, f"namespace={ns}", 'exported_namespace=""'])
        selected = f"({metric}{{{exported}}} or {metric}{{{plain}}})"
    return _workload(selected)


def _workload(expr: str) -> str:
    for label in WORKLOAD_LABELS:
        expr = f'label_replace({expr}, "{label}", "$1", "exported_{label}", "(.+)")'
    return expr


def _device(metric: str, where: Where) -> str:
    """`metric` per device: the max over its series (one per pod sharing it)."""
    model = f"{{modelName={_quote(where.model)}}}" if where.model is not None else ""
    return f"max by ({', '.join(DEVICE_LABELS)}) ({metric}{model})"


def _over(function: str, expr: str, where: Where) -> str:
    return f"{function}(({expr})[{where.range}])"


# -- per device, now -----------------------------------------------------------------------------------

def sm_active_now(where: Where = Where()) -> str:
    """Percent of time the graphics engine is active (SM activity), per device and MIG instance."""
    return f"100 * {_device(SM_ACTIVE, where)}"


def gpu_util_now(where: Where = Where()) -> str:
    """DCGM's GPU utilisation, percent, per whole GPU (no MIG instance has it)."""
    return _device(GPU_UTIL, where)


def fb_used_now(where: Where = Where()) -> str:
    """Framebuffer used, MiB, per device."""
    return _device(FB_USED, where)


def fb_total_now(where: Where = Where()) -> str:
    """Framebuffer used + free, MiB, per device (what the driver reserves is not counted)."""
    return f"{_device(FB_USED, where)} + {_device(FB_FREE, where)}"


def xid_now(where: Where = Where()) -> str:
    """The last XID error per device (0: none): which GPU the device plugin's health check took out (a critical
    XID, k8s-device-plugin internal/rm/health.go), where the node says one is unhealthy."""
    return _device(XID_ERRORS, where)


def pods_now(where: Where = Where()) -> str:
    """One series per (device, pod) for the pods on each device now."""
    return f"group by ({', '.join(DEVICE_LABELS + WORKLOAD_LABELS)}) ({_series(FB_USED, where)})"


# -- per device, over the window -----------------------------------------------------------------------

def sm_active_avg(where: Where = Where()) -> str:
    return f"100 * {_over('avg_over_time', _device(SM_ACTIVE, where), where)}"


def sm_active_peak(where: Where = Where()) -> str:
    return f"100 * {_over('max_over_time', _device(SM_ACTIVE, where), where)}"


def gpu_util_avg(where: Where = Where()) -> str:
    return _over("avg_over_time", _device(GPU_UTIL, where), where)


def gpu_util_peak(where: Where = Where()) -> str:
    return _over("max_over_time", _device(GPU_UTIL, where), where)


def fb_used_peak(where: Where = Where()) -> str:
    return _over("max_over_time", _device(FB_USED, where), where)


def pods_over(where: Where = Where()) -> str:
    """One series per (device, pod) for every pod seen on each device during the window."""
    return (f"group by ({', '.join(DEVICE_LABELS + WORKLOAD_LABELS)}) "
            f"({_over('last_over_time', _series(FB_USED, where), where)})")


# -- per namespace (tenant), over the window -----------------------------------------------------------

def _per_namespace_allocated(where: Where) -> str:
    """Devices (GPUs, slices, MIG instances) each namespace's pods hold now: one per (device, pod), by MIG
    profile ("" for whole and shared GPUs)."""
    pairs = f"group by ({', '.join(DEVICE_LABELS + WORKLOAD_LABELS)}) ({_series(FB_USED, where)})"
    return f"count by (namespace, GPU_I_PROFILE) ({pairs})"


def _covered_steps(where: Where) -> str:
    """The steps of the window at which Prometheus had GPU series at all (of `where`'s GPU model)."""
    model = f"{{modelName={_quote(where.model)}}}" if where.model is not None else ""
    return _over("count_over_time", f"max({FB_USED}{model})", where)


def _whole_window(expr: str, where: Where) -> str:
    """The average of `expr` over the steps of the window that have GPU series, a step without `expr`'s
    series counting as 0 (a pod that came late holds its GPU for part of the window)."""
    return f"{_over('sum_over_time', expr, where)} / on() group_left() {_covered_steps(where)}"


def coverage(where: Where = Where()) -> str:
    """The share (0-1) of the window's steps at which Prometheus had GPU series: 1 unless it started, or
    stopped scraping, within the window."""
    return f"{_covered_steps(where)} / count_over_time(vector(1)[{where.range}])"


def tenant_allocated_avg(where: Where = Where()) -> str:
    """Devices held by each namespace's pods, averaged over the window (by MIG profile, "" for GPUs)."""
    return _whole_window(_per_namespace_allocated(where), where)


def tenant_allocated_peak(where: Where = Where()) -> str:
    return _over("max_over_time", _per_namespace_allocated(where), where)


def tenant_busy_avg(where: Where = Where()) -> str:
    """GPU-equivalents busy (SM activity summed over the devices each namespace's pods hold), averaged over
    the window. A device shared by namespaces counts for each: its activity is the device's, not a pod's."""
    busy = (f"sum by (namespace) (max by ({', '.join(DEVICE_LABELS)}, namespace) "
            f"({_series(SM_ACTIVE, where)}))")
    return _whole_window(busy, where)


DEVICE_NOW = {"sm_active": sm_active_now, "gpu_util": gpu_util_now, "fb_used_mib": fb_used_now,
              "fb_total_mib": fb_total_now, "xid": xid_now}
DEVICE_WINDOW = {"sm_active_avg": sm_active_avg, "sm_active_peak": sm_active_peak, "gpu_util_avg": gpu_util_avg,
                 "gpu_util_peak": gpu_util_peak, "fb_used_peak_mib": fb_used_peak}
TENANT_WINDOW = {"allocated_avg": tenant_allocated_avg, "allocated_peak": tenant_allocated_peak,
                 "busy_avg": tenant_busy_avg}
