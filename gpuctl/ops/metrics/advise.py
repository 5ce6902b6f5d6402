"""`gpuctl advise`: what to change, from a window of GPU metrics (gpuctl.ops.metrics.gpu_metrics) and the cluster's
configuration (the node groups gpuctl recorded, tenants and their quotas). Reads only; each piece of advice
carries the figures behind it and the gpuctl command that applies it.

Rules (thresholds below):
- whole GPUs allocated but idle (utilisation peaked <= 30%, memory <= half) -> share them N ways, N at most
  100 / peak utilisation, at most total memory / peak memory, at most what the device plugin takes;
- a time-sliced group whose GPUs saturate (>= 90% on average) -> MPS, or fewer replicas;
- MIG instances that sat idle while pods asking for another profile are Pending -> a layout that fits the
  busy instances and that demand, checked on the GPU's real slot geometry (gpuctl.model.mig);
- a tenant whose pods held at most a quarter of its quota over the window -> a lower quota.

A GPU or MIG device its node reports unhealthy (gpu_metrics.device_health: `unhealthy`, or `unknown` where the
node's count names no device) is neither idle nor spare capacity: the rules leave it out, and the advice and a
note say so.

No advice comes from a window Prometheus covers less than 90 % of (ENOUGH_COVERAGE): its averages would be
over a part of it (a tenant made a minute ago "held 0.00 on average over 1h"). It says how much of the window
there is, when advice can follow (the time the window will be 90 % covered), and the longest window that is
covered now (`--since`).
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from gpuctl.kube.kube import Kube
from gpuctl.model import promql
from gpuctl.model.mig import check_layout, parse_layout
from gpuctl.model.sharing import MAX_REPLICAS, max_replicas
from gpuctl.model.taints import DEFAULT_GPU_TAINTS
from gpuctl.ops.metrics.gpu_metrics import (
    GPU,
    MIG_PREFIX,
    ClusterView,
    Device,
    Metrics,
    NodeInfo,
    cluster_of,
    coverage_note,
    device_health,
    node_groups,
    read_all,
    read_queues,
    recorded_groups,
)
from gpuctl.ops.tenancy.queues import queue_settings
from gpuctl.providers import PROVIDERS
from gpuctl.util.words import noun, plural

if TYPE_CHECKING:
    from gpuctl.kube.prometheus import Prometheus
    from gpuctl.model.catalog import GpuModel
    from gpuctl.model.spec import GroupPlan

IDLE_UTIL_PCT = 30.0  # a whole GPU whose utilisation peaked at or below this ...
IDLE_MEMORY_SHARE = 0.5  # ... and whose memory peaked at or below this share of its total: share it
SATURATED_PCT = 90.0  # a shared GPU at or above this on average is saturated
MIG_IDLE_PCT = 10.0  # a MIG instance no pod used, or whose SM activity peaked at or below this, sat idle
QUOTA_UNUSED = 0.25  # a tenant whose pods held at most this share of its quota on average
NOTHING = "nothing to advise"
ENOUGH_COVERAGE = 0.9  # the share of the window Prometheus must cover for advice (docs/observing.md)


def advise(kube: Kube, prom: Prometheus, window: str, context: str | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """{prometheus, window, coverage, advice: [...], withheld, notes}: each piece of advice with its figures and
    command; none, and `withheld` saying why and until when, where Prometheus covers too little of the window
    (withheld()). Prometheus is read first (what is most likely unreachable), then the cluster."""
    metrics, view = read_all(kube, prom, window)
    found = {"prometheus": prom.url.shown, "window": window, "coverage": metrics.coverage}
    gate = withheld(metrics, window, now or datetime.now(timezone.utc))
    if gate is not None:
        return {**found, "advice": [], "withheld": gate, "notes": [n for n in (claims_note(view),) if n]}
    read_queues(kube, view)
    identity = cluster_identity(kube.server, context)
    advice = advice_of(view, recorded_groups(kube), metrics.devices, metrics.usage, window, identity)
    notes = [n for n in (coverage_note(metrics, window), claims_note(view), unhealthy_note(view, metrics.devices))
             if n is not None]
    return {**found, "advice": advice, "withheld": None, "notes": notes}


def withheld(metrics: Metrics, window: str, now: datetime) -> dict[str, Any] | None:
    """Why the window gives no advice, where Prometheus has GPU series for less than ENOUGH_COVERAGE of it
    (None: it has enough): how much it has, the time from which the window will be covered enough if
    Prometheus goes on scraping (`ready_at`, UTC), and the longest window covered enough now (`since`, None
    where even the shortest, 1m, is not)."""
    if metrics.coverage is not None and metrics.coverage >= ENOUGH_COVERAGE:
        return None
    seconds = promql.window_seconds(window)
    coverage = metrics.coverage or 0.0
    covered = round(coverage * seconds)
    wait = max(math.ceil(ENOUGH_COVERAGE * seconds) - covered, 0)
    longest = int(covered / ENOUGH_COVERAGE) // 60 * 60  # whole minutes, as --since takes them
    since = promql.duration_text(longest) if longest >= promql.MIN_WINDOW_S else None
    has = (f"{promql.duration_text(covered)} of the {window} window" if covered
           else f"no GPU series in the {window} window")
    if metrics.coverage is None and not metrics.devices:  # none now either: nothing says when they start
        ready = None
        follows = (f"advice from the {window} window can follow {promql.duration_text(wait)} after Prometheus "
                   "scrapes the first GPU series (dcgm-exporter's)")
    else:
        ready = (now + timedelta(seconds=wait)).astimezone(timezone.utc).replace(microsecond=0)
        shortest = math.ceil(ENOUGH_COVERAGE * promql.MIN_WINDOW_S) - covered  # --since 1m's wait
        sooner = (f", or now with --since {since}" if since else
                  f", or with --since 1m in {promql.duration_text(shortest)}" if seconds > promql.MIN_WINDOW_S
                  else "")
        follows = (f"advice from the {window} window can follow at {ready:%Y-%m-%d %H:%M:%S} UTC (in "
                   f"{promql.duration_text(wait)}){sooner}")
    return {"reason": f"no advice yet: Prometheus has {has} ({coverage * 100:.1f} %); advice needs "
                      f"{ENOUGH_COVERAGE * 100:.0f} % of it",
            "next": follows, "covered_s": covered, "window_s": seconds, "coverage_pct": round(coverage * 100, 1),
            "needed_pct": round(ENOUGH_COVERAGE * 100),
            "ready_at": ready.isoformat().replace("+00:00", "Z") if ready else None, "ready_in_s": wait,
            "since": since}


def claims_note(view: ClusterView) -> str | None:
    """Where pods hold GPUs through ResourceClaims (DRA), why the sharing rules leave those GPUs out."""
    if not view.claimed:
        return None
    return (f"{plural(len(view.claimed), 'device')} held through ResourceClaims (DRA): dcgm-exporter, as the GPU "
            "Operator "
            "runs it, names no pod on their series, so the rules that weigh the window's pods (sharing idle or "
            "saturated GPUs) leave them out; under DRA a GPU is shared through its claim's config (the driver's "
            "GpuConfig sharing), not with --slices")


def unhealthy_note(view: ClusterView, devices: dict[Any, Device]) -> str | None:
    """Where nodes report unhealthy devices: which, and that no rule counted them as idle or spare."""
    health = device_health(devices, view)
    named = sorted(f"{d.node} GPU {d.name}" + (f" (XID {d.values['xid']:.0f})" if d.values.get("xid") else "")
                   for k, d in devices.items() if health.of(k) == "unhealthy")
    unnamed = [f"{node}: {plural(n, 'unhealthy ' + r.removeprefix('nvidia.com/'))} no series names"
               for node, counts in sorted(health.unnamed.items()) for r, n in counts.items()]
    if not named and not unnamed:
        return None
    return ("unhealthy devices (the device plugin reports them failed) are not idle capacity; the rules leave "
            "them out (and, where the node does not say which, its other devices of that resource): "
            + "; ".join(named + unnamed))


def advice_of(view: ClusterView, records: dict[str, GroupPlan], devices: dict[Any, Device],
              usage: dict[str, dict[str, Any]], window: str, identity: tuple[str, str]) -> list[dict[str, Any]]:
    """Every rule on what was read: per node group (its devices), then per tenant."""
    advice: list[dict[str, Any]] = []
    health = device_health(devices, view)
    for group, nodes in sorted(node_groups(view).items()):
        names = {n.name for n in nodes}
        mine = [d for k, d in devices.items() if d.node in names and health.of(k) == "healthy"]
        left_out = sorted(f"{d.node} GPU {d.name}" for k, d in devices.items()
                          if d.node in names and health.of(k) != "healthy")
        if not mine:
            continue
        setup = GroupSetup(group, nodes, records.get(group), *identity)
        for rule in (idle_whole_gpus, saturated_sharing, idle_mig_instances):
            found = rule(setup, mine, view, window)
            if found is not None:
                if left_out:
                    found["figures"]["unhealthy_left_out"] = len(left_out)
                    found["why"].append(f"left out, unhealthy or on a node that reports one without naming it: "
                                        f"{', '.join(left_out)}")
                advice.append(found)
    for name in sorted(view.tenants):
        found = unused_quota(name, view, usage.get(name, {}), window)
        if found is not None:
            advice.append(found)
    return advice


def cluster_identity(server: str, context: str | None) -> tuple[str, str]:
    """(cloud, cluster) for the commands: a sim cluster by its API server's URL, else the context gpuctl wrote
    (`gpuctl-<cloud>-<cluster>`, Provider.context_name); else placeholders the user fills in."""
    found = cluster_of(server)
    if found is not None:
        return found
    for cloud in PROVIDERS:
        if context and context.startswith(f"gpuctl-{cloud}-") and len(context) > len(f"gpuctl-{cloud}-"):
            return cloud, context.removeprefix(f"gpuctl-{cloud}-")
    return "CLOUD", "CLUSTER"


class GroupSetup:
    """A node group as the advice needs it: its nodes, GPU model, sharing and MIG layout (its record where
    gpuctl made it, else its nodes' labels), and the `cluster create` line that converges it."""

    def __init__(self, name: str, nodes: list[NodeInfo], record: GroupPlan | None, cloud: str, cluster: str) -> None:
        self.name, self.nodes, self.record = name, nodes, record
        first = nodes[0]
        self.model: GpuModel | None = record.spec.gpu if record else first.model
        self.strategy = record.sharing.strategy if record else first.sharing
        self.replicas = record.sharing.replicas if record else first.replicas
        self.mig = record.mig.name if record and record.mig else (
            first.mig_config if first.mig_config not in (None, "all-disabled") else None)
        self.cloud, self.cluster = cloud, cluster

    def create_command(self, sharing: list[str]) -> str:
        """`gpuctl cluster create` of this group as it is, with `sharing` flags instead of its own."""
        words = ["gpuctl cluster create", f"--cloud {self.cloud}", f"--name {self.cluster}",
                 f"--nodegroup-name {self.name}", f"--gpu {self.model.name if self.model else 'GPU'}",
                 f"--nodes {len(self.nodes)}"]
        if self.record is not None:
            spec = self.record.spec
            if self.model is not None and spec.gpus_per_node != self.model.default_gpus_per_node:
                words.append(f"--gpus-per-node {spec.gpus_per_node}")
            if spec.taints != DEFAULT_GPU_TAINTS:
                words += [f"--taint {t}" for t in spec.taints]
        return " ".join(words + sharing)

    def spec_hint(self, section: str) -> str:
        return (f"or, where a spec file made the cluster: nodeGroups[{self.name}].sharing: {section}, then "
                "'gpuctl apply -f SPEC'")


def _peak_util(d: Device) -> float | None:
    """The higher of DCGM's utilisation and SM activity: a GPU counts as busy by either."""
    values = [v for v in (d.values.get("gpu_util_peak"), d.values.get("sm_active_peak")) if v is not None]
    return max(values) if values else None


def _avg_util(d: Device) -> float | None:
    values = [v for v in (d.values.get("gpu_util_avg"), d.values.get("sm_active_avg")) if v is not None]
    return max(values) if values else None


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def idle_whole_gpus(group: GroupSetup, devices: list[Device], view: ClusterView, window: str) -> dict[str, Any] | None:
    """Whole GPUs, not shared, each with a pod on it, whose utilisation and memory stayed low: share them."""
    if group.strategy != "none" or group.mig is not None:
        return None
    whole = [d for d in devices if d.mig_profile is None]
    held = [d for d in whole if view.workloads(d.pods_window)]
    if not held:
        return None
    peaks = [_peak_util(d) for d in held]
    memory = [d.values.get("fb_used_peak_mib") for d in held]
    totals = [d.values.get("fb_total_mib") for d in held]
    if any(v is None for v in peaks + memory + totals):
        return None
    peak, mem, total = max(peaks), max(memory), min(totals)  # type: ignore[type-var]
    assert peak is not None and mem is not None and total is not None
    if peak > IDLE_UTIL_PCT or mem > IDLE_MEMORY_SHARE * total:
        return None
    by_util = math.floor(100 / max(peak, 1.0))
    by_memory = math.floor(total / max(mem, 1.0))
    limit = max_replicas("time-slicing", group.model) if group.model else MAX_REPLICAS
    slices = min(by_util, by_memory, limit)
    if slices < 2:
        return None
    return {
        "rule": "share-idle-gpus", "nodegroup": group.name,
        "summary": f"node group {group.name}: share each GPU {slices} ways (time-slicing)",
        "figures": {"gpus": len(held), "peak_util_pct": round(peak, 1), "peak_memory_mib": round(mem),
                    "memory_mib": round(total), "slices": slices, "by_util": by_util, "by_memory": by_memory,
                    "max_replicas": limit},
        "why": [f"{plural(len(held), 'whole GPU')} held by pods over {window}: utilisation peaked at {peak:.0f}% "
                f"(<= {IDLE_UTIL_PCT:.0f}%), memory at {_gib(mem)} of {_gib(total)} (<= half)",
                f"{slices} = min(floor(100 / {max(peak, 1.0):.0f}%) = {by_util}, floor({_gib(total)} / "
                f"{_gib(max(mem, 1.0))}) = {by_memory}, {limit} (the device plugin's most replicas))"],
        "command": group.create_command([f"--slices {slices}"]),
        "alternative": group.spec_hint(f"{{timeSlicing: {{replicas: {slices}}}}}"),
    }


def saturated_sharing(group: GroupSetup, devices: list[Device], view: ClusterView,
                      window: str) -> dict[str, Any] | None:
    """A time-sliced group whose GPUs were busy >= 90% on average: MPS, or fewer replicas."""
    if group.strategy != "time-slicing":
        return None
    averages = [a for d in devices if d.mig_profile is None and (a := _avg_util(d)) is not None]
    if not averages or sum(averages) / len(averages) < SATURATED_PCT:
        return None
    mean = sum(averages) / len(averages)
    pods = max((len(view.workloads(d.pods_window)) for d in devices), default=0)
    fewer = max(group.replicas // 2, 1)
    commands = []
    mps_limit = max_replicas("mps", group.model) if group.model else None
    if group.mig is None and mps_limit is not None and group.replicas <= mps_limit:
        commands.append(group.create_command(["--sharing mps", f"--slices {group.replicas}"]))
    commands.append(group.create_command([f"--slices {fewer}"] if fewer > 1 else ["--sharing none"]))
    return {
        "rule": "saturated-sharing", "nodegroup": group.name,
        "summary": f"node group {group.name}: its time-sliced GPUs are saturated: MPS, or {plural(fewer, 'replica')} "
                   f"instead of {group.replicas}",
        "figures": {"gpus": len(averages), "avg_util_pct": round(mean, 1), "replicas": group.replicas,
                    "most_pods_on_a_gpu": pods, "fewer_replicas": fewer},
        "why": [f"{plural(len(averages), 'GPU')} shared {group.replicas} ways {noun(len(averages), 'was', 'were')} "
                f"{mean:.0f}% busy on average over "
                f"{window} (>= {SATURATED_PCT:.0f}%), up to {plural(pods, 'pod')} on one GPU: time-slices queue behind "
                "each other",
                "MPS runs the pods' kernels side by side with a fixed share of SMs each; fewer replicas give each "
                "pod a larger slice (and need more GPUs for as many pods)"],
        "command": commands[0],
        "alternative": " or ".join(commands[1:]) or None,
    }


def idle_mig_instances(group: GroupSetup, devices: list[Device], view: ClusterView,
                       window: str) -> dict[str, Any] | None:
    """MIG instances that sat idle while pods asking for another profile were Pending: a layout fitting the
    busy instances and that demand, placed on the GPU's slot geometry."""
    if group.mig is None or group.model is None or group.model.mig is None:
        return None
    instances = [d for d in devices if d.mig_profile is not None]
    idle = [d for d in instances if not view.workloads(d.pods_window)
            or (d.values.get("sm_active_peak") or 0.0) <= MIG_IDLE_PCT]
    if not idle:
        return None
    idle_profiles = Counter(str(d.mig_profile) for d in idle)
    pending: Counter[str] = Counter()
    for pod in view.pods:
        if pod.phase == "Pending":
            for resource, n in pod.gpu_requests.items():
                profile = resource.removeprefix(MIG_PREFIX)
                if resource.startswith(MIG_PREFIX) and profile not in idle_profiles \
                        and group.model.mig.profile(profile) is not None:
                    pending[profile] += n
    if not pending:
        return None
    gpus = len({(d.node, d.gpu) for d in instances}) or 1
    busy = Counter(str(d.mig_profile) for d in instances if all(d is not i for i in idle))
    per_gpu = [p for p, n in busy.items() for _ in range(math.ceil(n / gpus))]
    if per_gpu and not check_layout(_layout(per_gpu), group.model)[0]:
        return None
    added: Counter[str] = Counter()
    for profile, wanted in pending.most_common():
        for _ in range(math.ceil(wanted / gpus)):
            if not check_layout(_layout([*per_gpu, profile]), group.model)[0]:
                break
            per_gpu.append(profile)
            added[profile] += 1
    if not added:
        return None
    layout = parse_layout(_layout(per_gpu), group.model).name
    if layout == group.mig:
        return None
    return {
        "rule": "mig-layout", "nodegroup": group.name,
        "summary": f"node group {group.name}: MIG layout {layout} instead of {group.mig}",
        "figures": {"layout": group.mig, "proposed": layout, "gpus": gpus,
                    "idle_instances": dict(sorted(idle_profiles.items())),
                    "busy_instances": dict(sorted(busy.items())), "pending_pods": dict(sorted(pending.items()))},
        "why": [f"over {window}, {noun(sum(idle_profiles.values()), 'idle MIG instance')}: "
                + ", ".join(f"{n} x {p}" for p, n in sorted(idle_profiles.items()))
                + f" (no pod, or SM activity <= {MIG_IDLE_PCT:.0f}%)",
                "Pending pods ask for: " + ", ".join(f"{n} x {p}" for p, n in sorted(pending.items())),
                f"{layout} keeps the busy instances and fits the GPU's slots ('gpuctl mig plan {layout} "
                f"--gpu {group.model.name}')"],
        "command": f"gpuctl mig apply {layout} --nodegroup {group.name}",
        "alternative": group.spec_hint(f"{{mig: {{layout: {layout}}}}}"),
    }


def _layout(profiles: list[str]) -> str:
    return "-".join(f"{n}x{p}" for p, n in Counter(profiles).items())


def unused_quota(name: str, view: ClusterView, usage: dict[str, Any], window: str) -> dict[str, Any] | None:
    """A tenant whose pods held at most a quarter of its quota on average: the quota its peak needs."""
    tenant = view.tenants[name]
    borrow, lend, cohort = queue_settings(tenant.queue)
    now: Counter[str] = Counter()
    for pod in view.pods:
        if pod.namespace == name and pod.node and pod.phase not in ("Succeeded", "Failed"):
            now.update(pod.gpu_requests)
    nominal = {r: max(q - borrow, 0) for r, q in tenant.quota.items() if r == GPU or r.startswith(MIG_PREFIX)}
    proposed = dict(nominal)
    why = []
    for resource, quota in nominal.items():
        avg = usage.get("allocated_avg", {}).get(resource, 0.0)
        peak = usage.get("allocated_peak", {}).get(resource, 0.0)
        if quota <= 0 or avg > QUOTA_UNUSED * quota:
            continue
        wanted = max(math.ceil(peak), now[resource], 1)
        if wanted >= quota:
            continue
        proposed[resource] = wanted
        what = "GPUs" if resource == GPU else resource.removeprefix(MIG_PREFIX) + " instances"
        why.append(f"{what}: quota {quota}, held {avg:.2f} on average over {window} (<= {QUOTA_UNUSED:.0%}), "
                   f"at most {peak:g}, {now[resource]} requested now -> {wanted}")
    if proposed == nominal:
        return None
    words = [f"gpuctl tenant add {name}", f"--gpus {proposed.get(GPU, 0)}"]
    words += [f"--mig {r.removeprefix(MIG_PREFIX)}={n}" for r, n in sorted(proposed.items()) if r != GPU and n > 0]
    if tenant.group:
        words.append(f"--group {tenant.group}")
    if borrow:
        words.append(f"--borrow {borrow}")
    if lend is not None:
        words.append(f"--lend {lend}")
    if cohort and cohort != "gpuctl":
        words.append(f"--cohort {cohort}")
    return {
        "rule": "unused-quota", "tenant": name,
        "summary": f"tenant {name}: lower its quota to what it uses",
        "figures": {"quota": nominal, "proposed": proposed,
                    "allocated_avg": {r: round(v, 2) for r, v in usage.get("allocated_avg", {}).items()},
                    "allocated_peak": usage.get("allocated_peak", {}), "allocated_now": dict(now)},
        "why": why,
        "command": " ".join(words),
        "alternative": "or, where a spec file made the cluster: the tenant's gpus and mig there, then "
                       "'gpuctl apply -f SPEC'",
    }


def render_text(result: dict[str, Any]) -> str:
    """The advice as numbered paragraphs, each with its figures and command (the table form)."""
    notes = [f"note: {n}" for n in result.get("notes", [])]
    if result.get("withheld"):
        return "\n".join([result["withheld"]["reason"], result["withheld"]["next"], *notes])
    if not result["advice"]:
        return "\n".join([NOTHING, *notes])
    lines = []
    for i, item in enumerate(result["advice"], 1):
        lines.append(f"{i}. {item['summary']}")
        lines += [f"   {w}" for w in item["why"]]
        lines.append(f"   apply: {item['command']}")
        if item.get("alternative"):
            lines.append(f"   {item['alternative']}")
        lines.append("")
    return "\n".join(lines + notes).rstrip()
