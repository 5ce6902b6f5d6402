"""`gpuctl top`: the GPUs at work, from Prometheus (dcgm-exporter's series, gpuctl.model.promql) and the
cluster: per node and GPU (and MIG instance) SM activity, utilisation, framebuffer and the pods on it; per
tenant the GPUs its pods hold against its quota and how busy they were over a window.

A GPU several pods share (time-slicing, MPS) has one set of figures, the device's: dcgm-exporter cannot
attribute them per pod (NVIDIA/dcgm-exporter#307), so they are shown once, marked, never split.

A GPU the device plugin reports unhealthy is marked `!` (gpu_metrics.device_health: the node's capacity above its
allocatable, pinned to the GPU by DCGM's last XID), `?` where the node says so and no series names the GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.kube.gpu_nodes import unhealthy_whole_gpus
from gpuctl.kube.kube import Kube
from gpuctl.model import promql
from gpuctl.model.mig import resource_name
from gpuctl.ops.metrics.gpu_metrics import (
    DONE,
    GPU,
    ClusterView,
    Device,
    Health,
    attach_claimed,
    check_nodegroup,
    check_tenant,
    coverage_note,
    device_health,
    read_all,
)
from gpuctl.util.words import noun, plural

if TYPE_CHECKING:
    from gpuctl.kube.prometheus import Prometheus

SHARED_NOTE = ("* shared by several pods (time-slicing or MPS): the figures are the whole GPU's; dcgm-exporter "
               "cannot attribute them per pod (NVIDIA/dcgm-exporter#307)")
UNHEALTHY_NOTE = ("! unhealthy: the device plugin reports it failed (the kubelet keeps it in the node's capacity, "
                  "not in its allocatable) and DCGM names it by its last XID; 'gpuctl doctor' says why")
UNKNOWN_NOTE = ("? the node reports unhealthy GPUs that no XID series names: one of those marked, or one without "
                "series")
WIDTH = 80
MIB_PER_GIB = 1024


def top(kube: Kube, prom: Prometheus, window: str, nodegroup: str | None = None,
        tenant: str | None = None) -> dict[str, Any]:
    """The view `gpuctl top` prints: {prometheus, window, gpus: [...], tenants: [...], notes: [...]}. Prometheus
    is read first (what is most likely unreachable), then the cluster."""
    metrics, view = read_all(kube, prom, window)
    check_nodegroup(view, nodegroup)
    check_tenant(view, tenant)
    unplaced = attach_claimed(metrics.devices, view.claimed)
    found = top_of(view, metrics.devices, metrics.usage, nodegroup, tenant, f"Prometheus at {prom.url.shown}")
    found["notes"] += unplaced
    if (note := coverage_note(metrics, window)) is not None:
        found["notes"].append(note)
    return {"prometheus": prom.url.shown, "window": window, "coverage": metrics.coverage, **found}


def top_of(view: ClusterView, devices: dict[Any, Device], usage: dict[str, dict[str, Any]],
           nodegroup: str | None = None, tenant: str | None = None, source: str = "Prometheus") -> dict[str, Any]:
    """gpus, tenants, unhealthy (nodes that report unhealthy devices) and notes of what was read, narrowed to
    `nodegroup` and `tenant`."""
    health = device_health(devices, view)
    gpus = [row for k, d in sorted(devices.items(), key=lambda kd: _order(kd[1]))
            if _wanted(row := gpu_row(d, view, health.of(k)), nodegroup, tenant)]
    tenants = [tenant_row(name, view, usage.get(name, {}), devices)
               for name in sorted(view.tenants) if tenant is None or name == tenant]
    notes = []
    if any(g["attribution"] == "device" for g in gpus) or any(t["shared_gpus"] for t in tenants):
        notes.append(SHARED_NOTE)
    shown = {g["node"] for g in gpus}
    unhealthy = [row for row in unhealthy_nodes(view, health) if (nodegroup is None or row["nodegroup"] == nodegroup)
                 and (tenant is None or row["node"] in shown)]
    if any(g["health"] == "unhealthy" for g in gpus):
        notes.append(UNHEALTHY_NOTE)
    if any(g["health"] == "unknown" for g in gpus) or any(u["unnamed"] for u in unhealthy):
        notes.append(UNKNOWN_NOTE)
    if not devices:
        notes.append(f"{source} has no dcgm-exporter series ({promql.FB_USED}): is dcgm-exporter running and "
                     "scraped?")
    else:
        missing = sorted(set(view.nodes) - {d.node for d in devices.values()})
        if missing and nodegroup is None and tenant is None:
            notes.append(f"no GPU series for {noun(len(missing), 'node')} {', '.join(missing)}")
    return {"gpus": gpus, "tenants": tenants, "unhealthy": unhealthy, "notes": notes}


def unhealthy_nodes(view: ClusterView, health: Health) -> list[dict[str, Any]]:
    """The nodes that report unhealthy devices: by resource as the kubelet counts them (a GPU shared N ways is N),
    the whole GPUs among them (as `status` counts them), and the GPUs or MIG devices that no series names
    (`unnamed`)."""
    return [{"node": n.name, "nodegroup": n.nodegroup, "unhealthy": n.unhealthy,
             "unhealthy_gpus": unhealthy_whole_gpus(n.unhealthy, n.replicas, n.mig_config),
             "unnamed": health.unnamed.get(n.name, {})}
            for n in sorted(view.nodes.values(), key=lambda n: n.name) if n.unhealthy]


def _order(device: Device) -> tuple[str, int, str, int]:
    index = int(device.gpu) if device.gpu.isdigit() else -1
    instance = int(device.mig_id) if device.mig_id is not None and device.mig_id.isdigit() else -1
    return device.node, index, device.uuid, instance


def _wanted(row: dict[str, Any], nodegroup: str | None, tenant: str | None) -> bool:
    if nodegroup is not None and row["nodegroup"] != nodegroup:
        return False
    return tenant is None or any(p.split("/", 1)[0] == tenant for p in row["pods"])


def _number(text: str | None) -> int | str | None:
    """A GPU's index or a MIG instance's id as the number it is (DCGM's labels hold it as text)."""
    return int(text) if text is not None and text.isdigit() else text


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def gpu_row(device: Device, view: ClusterView, health: str = "healthy") -> dict[str, Any]:
    node = view.nodes.get(device.node)
    pods = sorted(view.workloads(device.pods))
    v = device.values
    return {
        "node": device.node, "nodegroup": node.nodegroup if node else None, "gpu": _number(device.gpu),
        "uuid": device.uuid or None, "product": device.model or None, "mig_profile": device.mig_profile,
        "mig_instance": _number(device.mig_id),
        "sm_active": _rounded(v.get("sm_active")), "gpu_util": _rounded(v.get("gpu_util")),
        "fb_used_mib": _rounded(v.get("fb_used_mib"), 0), "fb_total_mib": _rounded(v.get("fb_total_mib"), 0),
        "sm_active_avg": _rounded(v.get("sm_active_avg")), "sm_active_peak": _rounded(v.get("sm_active_peak")),
        "pods": [f"{ns}/{name}" for ns, name in pods],
        # whose figures these are: one pod's GPU ("pod"), several pods' ("device": not attributable), none
        "attribution": "pod" if len(pods) == 1 else "device" if pods else None,
        "xid": None if v.get("xid") is None else int(v["xid"] or 0),  # DCGM's last XID (0: none)
        "health": health,  # healthy | unhealthy | unknown (gpu_metrics.device_health)
    }


def tenant_row(name: str, view: ClusterView, usage: dict[str, Any], devices: dict[Any, Device]) -> dict[str, Any]:
    """A tenant's quota, what its pods request now, the devices they held over the window (average and peak)
    and how busy those were (GPU-equivalents: 1.0 is one GPU fully active)."""
    tenant = view.tenants[name]
    allocated: dict[str, int] = {}
    for pod in view.pods:
        if pod.namespace == name and pod.node and pod.phase not in DONE:
            for key, n in pod.gpu_requests.items():
                allocated[key] = allocated.get(key, 0) + n
    for key, n in claimed_by(view, name).items():
        allocated[key] = allocated.get(key, 0) + n
    resources = sorted(set(tenant.quota) | set(allocated) | set(usage.get("allocated_avg", {})),
                       key=lambda r: (r != GPU, r))
    held_avg = sum(usage.get("allocated_avg", {}).values())
    busy = usage.get("busy_avg")
    shared = any(len(view.workloads(d.pods_window)) > 1 and any(ns == name for ns, _ in d.pods_window)
                 for d in devices.values())
    return {
        "tenant": name, "resources": resources,
        "quota": {r: tenant.quota.get(r, 0) for r in resources},
        # `used`, as `tenant list` names what the team's pods hold now against its quota
        "used": {r: allocated.get(r, 0) for r in resources},
        "used_avg": {r: round(usage.get("allocated_avg", {}).get(r, 0.0), 2) for r in resources},
        "used_peak": {r: round(usage.get("allocated_peak", {}).get(r, 0.0), 2) for r in resources},
        "busy_avg": None if busy is None else round(busy, 2),
        "busy_pct": round(100 * busy / held_avg, 1) if busy is not None and held_avg > 0 else None,
        "shared_gpus": shared,
    }


def claimed_by(view: ClusterView, tenant: str) -> dict[str, int]:
    """The devices the tenant's ResourceClaims hold now, as the resources a request would name (a MIG device
    as nvidia.com/mig-<profile>); a device held for pods that request GPUs (the scheduler's claim for an
    extended resource the DRA driver serves) is counted by their requests already."""
    requesting = {(p.namespace, p.name) for p in view.pods if p.gpu_requests}
    held: dict[str, int] = {}
    for device in view.claimed:
        if any(ns == tenant for ns, _ in device.pods) and not device.pods & requesting:
            key = GPU if device.mig_profile is None else resource_name(device.mig_profile)
            held[key] = held.get(key, 0) + 1
    return held


# -- the table -----------------------------------------------------------------------------------------

def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _memory(used: float | None, total: float | None) -> str:
    if used is None and total is None:
        return "-"
    used_text = "-" if used is None else f"{used / MIB_PER_GIB:.1f}"
    return used_text if total is None else f"{used_text}/{total / MIB_PER_GIB:.1f}"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "~"


def _pods_cell(pods: list[str], width: int) -> str:
    if not pods:
        return "-"
    prefix = f"{len(pods)}*: " if len(pods) > 1 else ""
    text = prefix + ", ".join(pods)
    if len(text) <= width:
        return text
    for shown_count in range(len(pods) - 1, 0, -1):
        more = f" +{len(pods) - shown_count}"
        text = prefix + ", ".join(pods[:shown_count]) + more
        if len(text) <= width:
            return text
    return _fit(prefix + pods[0], width - len(f" +{len(pods) - 1}")) + (f" +{len(pods) - 1}" if len(pods) > 1 else "")


def _columns(header: list[str], rows: list[list[str]], right: set[int], width: int = WIDTH) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        text = "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                               strict=True)))
        return _fit(text.rstrip(), width)

    return [line(header)] + [line(r) for r in rows]


def render_table(view: dict[str, Any], width: int = WIDTH) -> str:
    """The view as text at most `width` columns wide: GPUs grouped under their node, then tenants, then notes."""
    window = view["window"]
    lines: list[str] = []
    header = ["GPU", "SM%", "UTIL%", "MEM GiB", f"SM% {window}", "PODS"]
    entries: list[str | list[str]] = []  # a node's line, or a GPU's cells (its pods last, fitted below)
    pods: list[list[str]] = []
    node = None
    unhealthy = {u["node"]: u for u in view.get("unhealthy", [])}
    for g in view["gpus"]:
        if g["node"] != node:
            node = g["node"]
            entries.append(_node_line(node, g["nodegroup"], unhealthy.get(node)))
        name = str(g["gpu"]) if g["mig_profile"] is None else f"{g['gpu']}/{g['mig_profile']}"
        mark = {"unhealthy": "!", "unknown": "?"}.get(g.get("health", "healthy"), "")
        entries.append([_fit("  " + name, 16 - len(mark)) + mark, _pct(g["sm_active"]), _pct(g["gpu_util"]),
                        _memory(g["fb_used_mib"], g["fb_total_mib"]), _pct(g["sm_active_avg"])])
        pods.append(g["pods"])
    cells = [e for e in entries if isinstance(e, list)]
    used = sum(max(len(header[i]), *(len(c[i]) for c in cells)) if cells else len(header[i]) for i in range(5))
    pods_width = max(width - used - 2 * 5, 12)
    for c, on_it in zip(cells, pods, strict=True):
        c.append(_pods_cell(on_it, pods_width))
    if entries:
        formatted = iter(_columns(header, [e for e in entries if isinstance(e, list)], {1, 2, 3, 4}, width))
        lines.append(next(formatted))
        lines += [_fit(e, width) if isinstance(e, str) else next(formatted) for e in entries]
    else:
        lines.append("no GPU series")
    shown = {g["node"] for g in view["gpus"]}
    lines += [_fit(_node_line(u["node"], u["nodegroup"], u) + ", no GPU series", width)
              for u in unhealthy.values() if u["node"] not in shown]
    tenant_rows = []
    for t in view["tenants"]:
        for i, resource in enumerate(t["resources"] or [GPU]):
            busy = "-" if t["busy_avg"] is None else f"{t['busy_avg']:.2f}" + (
                f" ({t['busy_pct']:.0f}%)" if t["busy_pct"] is not None else "")
            tenant_rows.append([_fit(t["tenant"], 20) if i == 0 else "", _fit(resource.removeprefix("nvidia.com/"), 16),
                                str(t["quota"].get(resource, 0)), str(t["used"].get(resource, 0)),
                                f"{t['used_avg'].get(resource, 0):g}", f"{t['used_peak'].get(resource, 0):g}",
                                (busy + ("*" if t["shared_gpus"] else "")) if i == 0 else ""])
    if tenant_rows:
        lines.append("")
        lines += _columns(["TENANT", "RESOURCE", "QUOTA", "NOW", f"AVG {window}", f"PEAK {window}",
                           f"BUSY {window}"], tenant_rows, {2, 3, 4, 5}, width)
    for note in view["notes"]:
        lines.append("")
        lines += _wrap(note, width)
    return "\n".join(lines)


def _node_line(node: str, nodegroup: str | None, unhealthy: dict[str, Any] | None) -> str:
    """A node's line over its GPUs: `gpu-1 (node group gpu)`, and what it reports unhealthy."""
    line = f"{node} (node group {nodegroup})" if nodegroup else node
    if unhealthy:
        line += ": unhealthy " + ", ".join(f"{n} {r.removeprefix('nvidia.com/')}"
                                           for r, n in unhealthy["unhealthy"].items())
        if unhealthy["unhealthy_gpus"] and unhealthy["unhealthy"].get(GPU) != unhealthy["unhealthy_gpus"]:
            line += f" ({plural(unhealthy['unhealthy_gpus'], 'GPU')})"  # replicas of shared GPUs
    return line


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, subsequent_indent="  ") or [""]
