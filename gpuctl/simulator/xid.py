"""XID faults on the sim's GPUs, and what the device plugin makes of them: which devices it marks Unhealthy.

A test (or a user) puts a fault on a node with the annotation FAULT_XID: a comma list of `<gpu index>:<xid>` (an
XID event of the whole GPU) or `<gpu index>/<gpu instance id>:<xid>` (an event of one MIG GPU instance, its compute
instance 0, the one the sim makes per instance). Absent: no fault (the GPU was reset or replaced).

The rules are NVIDIA/k8s-device-plugin v0.20.0's (the plugin the pinned GPU Operator v26.7.0 ships; tag commit
1b826acc6af3079d8923bac395c3124b8861a9a6), internal/rm/health.go:
- checkHealth: only nvml.EventTypeXidCriticalError events count; getDisabledHealthCheckXids(): the application
  XIDs 13, 31, 43, 45, 68, 109 are ignored, DP_DISABLE_HEALTHCHECKS (the container's env: a comma list of XIDs,
  or `all`/`xids` for every XID) ignores more, DP_ENABLE_HEALTHCHECKS re-enables XIDs (it wins over both; `all`
  there re-enables every XID); with `all` disabled, checkHealth returns at once (IsAllDisabled) and no device
  is ever marked, an XID DP_ENABLE_HEALTHCHECKS names included (its comment says otherwise; its code and
  health_test.go "disabled is all" do not); malformed values are ignored (newHealthCheckXIDs).
- a MIG device: the event marks it only when the event's GPU instance and compute instance are its own; an event
  without them (0xFFFFFFFF: the whole GPU) marks it too. Upstream keys its devices by the parent GPU's UUID
  (parentToDeviceMap[uuid] = d), so per resource (each MIG profile is its own resource manager) it keeps ONE
  MIG device of each GPU, the last of a Go map's random order: a whole-GPU event marks one device of each
  profile on that GPU, and an instance's event can be skipped when the GPU has several devices of its profile.
  The sim keeps the intended rule for an instance's event (its device is marked) and, for a whole-GPU event,
  marks one device of each profile (the lowest instance ID), as upstream does in count.
- internal/plugin/server.go ListAndWatch: "FIXME: there is no way to recover from the Unhealthy state": a device
  stays Unhealthy until the plugin pod restarts (a new pod runs checkHealth afresh). The sim's plugin keeps its
  unhealthy devices per pod for that reason (operator.py), so clearing the annotation returns the GPU only once
  the node's device-plugin pod is restarted.
The kubelet then counts the device in capacity and not in allocatable (gpuctl.kube.gpu_nodes.unhealthy_gpus).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FAULT_XID = "sim.gpuctl.dev/fault-xid"  # the fault a test puts on a node
# The sim plugin's decision on each fault it read, as JSON {"<fault>": "<decision>"}: what a test waits on to see
# an XID ignored (the real plugin's klog line "Skipping event ...", "XidCriticalError: Xid=... marking ...").
XID_DECISIONS = "sim.gpuctl.dev/xid-health"
ENV_DISABLE = "DP_DISABLE_HEALTHCHECKS"
ENV_ENABLE = "DP_ENABLE_HEALTHCHECKS"
# health.go getDisabledHealthCheckXids ignoredXids: application errors, "the GPU should still be healthy".
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
ALL = 0  # health.go allXIDs


@dataclass(frozen=True)
class XidFault:
    gpu: int
    instance: int | None  # the GPU instance ID of a MIG device's event; None: the whole GPU
    xid: int

    @property
    def text(self) -> str:
        where = str(self.gpu) if self.instance is None else f"{self.gpu}/{self.instance}"
        return f"{where}:{self.xid}"


@dataclass(frozen=True)
class SimDevice:
    """A device the plugin lists: a GPU (instance None) or a MIG device, with the resource it belongs to."""

    gpu: int
    resource: str
    instance: int | None = None

    @property
    def key(self) -> str:
        return str(self.gpu) if self.instance is None else f"{self.gpu}/{self.instance}"


def parse_faults(text: str | None) -> tuple[list[XidFault], list[str]]:
    """The faults of an annotation's value, and the entries that are none (said in the decisions)."""
    faults, bad = [], []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        where, _, xid = entry.partition(":")
        gpu, _, instance = where.partition("/")
        if not (gpu.isdigit() and xid.isdigit() and (instance.isdigit() or "/" not in where)):
            bad.append(entry)
            continue
        faults.append(XidFault(int(gpu), int(instance) if "/" in where else None, int(xid)))
    return faults, bad


def _xids(text: str) -> dict[int, bool]:
    """health.go newHealthCheckXIDs: `all`/`xids` anywhere means every XID; malformed entries are ignored."""
    out: dict[int, bool] = {}
    for part in text.lower().split(","):
        part = part.strip()
        if part in ("all", "xids"):
            return {ALL: True}
        if part.isdigit():
            out[int(part)] = True
    return out


def disabled_xids(env: Mapping[str, str]) -> dict[int, bool]:
    """health.go getDisabledHealthCheckXids: XID -> disabled, ALL for every XID."""
    disabled = _xids(env.get(ENV_DISABLE, ""))
    for xid in IGNORED_XIDS:
        disabled[xid] = True
    for xid in _xids(env.get(ENV_ENABLE, "")):
        disabled[xid] = False
    return disabled


def all_disabled(disabled: Mapping[int, bool]) -> bool:
    """health.go IsAllDisabled."""
    return disabled.get(ALL, False)


def is_disabled(disabled: Mapping[int, bool], xid: int) -> bool:
    """health.go IsDisabled."""
    if disabled.get(ALL) is False:
        return False  # DP_ENABLE_HEALTHCHECKS=all
    if xid in disabled:
        return disabled[xid]
    return all_disabled(disabled)


def mark_unhealthy(faults: Iterable[XidFault], devices: list[SimDevice],
                   env: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    """The keys of the devices the plugin marks Unhealthy for `faults`, and its decision on each fault."""
    disabled = disabled_xids(env)
    marked: set[str] = set()
    decisions: dict[str, str] = {}
    for fault in faults:
        if all_disabled(disabled):
            decisions[fault.text] = f"ignored: health checks disabled ({ENV_DISABLE}={env.get(ENV_DISABLE, '')})"
            continue
        if is_disabled(disabled, fault.xid):
            why = "an application XID" if fault.xid in IGNORED_XIDS else ENV_DISABLE
            decisions[fault.text] = f"ignored: XID {fault.xid} is {why}"
            continue
        on_gpu = [d for d in devices if d.gpu == fault.gpu]
        if fault.instance is None:
            hit: dict[str, SimDevice] = {}
            for d in sorted(on_gpu, key=lambda d: (d.resource, d.instance or 0)):
                hit.setdefault(d.resource, d)  # one device per resource manager of this GPU (see above)
            chosen = list(hit.values())
        elif all(d.instance is None for d in on_gpu):
            chosen = on_gpu  # MIG is off on that GPU: the plugin's device is the whole GPU (d.IsMigDevice() false)
        else:
            chosen = [d for d in on_gpu if d.instance == fault.instance]
        if not chosen:
            decisions[fault.text] = "ignored: no such device on this node"
            continue
        marked.update(d.key for d in chosen)
        decisions[fault.text] = "unhealthy: " + ", ".join(f"{d.resource} {d.key}" for d in chosen)
    return marked, decisions


def last_xid(faults: Iterable[XidFault], gpu: int, instance: int | None) -> int:
    """What DCGM reports as DCGM_FI_DEV_XID_ERRORS ("Value of the last XID error encountered", dcgm-exporter's
    default-counters.csv) for a GPU (`instance` None) or a MIG GPU instance: the last fault of that GPU or
    instance, whatever the device plugin makes of it (DCGM ignores no XID); 0 with none."""
    found = 0
    for fault in faults:
        if fault.gpu == gpu and (fault.instance is None or instance is None or fault.instance == instance):
            found = fault.xid
    return found
