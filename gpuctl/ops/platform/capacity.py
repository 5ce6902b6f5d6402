"""The `wait-capacity/<group>` step: until the nodes offer what was configured and what serves it is
rolled out and ready, so that the validation after it cannot see a half-made state.

- Device plugin: allocatable on every node of the group against the configuration (gpuctl.ops.validate
  expected_resources), and the device-plugin DaemonSet rolled out as `kubectl rollout status` judges it
  with every pod ready (validate.Rollout). A Helm upgrade or a changed config rolls or restarts the
  plugin's pods; a pod just deleted still counts as ready in the DaemonSet's status until its
  controller catches up, so the pods are read too. A changed ClusterPolicy reaches the DaemonSet only
  once the GPU Operator has rewritten it, a moment after the upgrade; until then the old DaemonSet
  looks rolled out, its pods about to be replaced. So the DaemonSet must carry the ClusterPolicy
  first (gpuctl.stack.plugin_template, after NVIDIA/gpu-operator's object_controls.go), then roll out;
  a toleration the run drops (a taint no group has any more) must be gone from it too.
- DRA mode: the devices each node's ResourceSlice publishes, and the DRA driver's kubelet plugin ready
  on every node.
The wait lasts while nodes keep converging (gpuctl.util.waiting): 1,000 nodes take minutes, two take seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

from gpuctl.kube.cached_lists import cached_lists
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.gpu_nodes import gpu_resources
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.dra import API_VERSION as DRA_API_VERSION
from gpuctl.model.taints import Taint, tolerations
from gpuctl.ops.devices import (
    DRA_PLUGIN_SELECTOR,
    PLUGIN_SELECTOR,
    RACE_GRACE_S,
    plugin_state,
    pods_by_node,
    read_node_devices,
)
from gpuctl.ops.platform.run import Run
from gpuctl.ops.smoke import Check
from gpuctl.ops.validate import (
    check_capacity,
    check_device_plugins,
    check_dra_capacity,
    check_kubelet_plugins,
    device_plugin_rollouts,
    expected_devices,
    expected_resources,
    raced_plugin_nodes,
    read_configs,
)
from gpuctl.stack.dra_driver import NAMESPACE as DRA_NAMESPACE
from gpuctl.stack.existing import CLUSTER_POLICY
from gpuctl.stack.plugin_template import policy_not_carried
from gpuctl.util.output import info
from gpuctl.util.waiting import STALL_S, Count, Look, wait_until

CONFIG_RACE_SHORT = "launched by Karpenter, its device plugin serves no GPU (NVIDIA/k8s-device-plugin #1645)"
# What each look reads again and again, from watches while the wait lasts (the DaemonSets and configs are few)
CACHED_KINDS = frozenset({("v1", "Node"), ("v1", "Pod"), (DRA_API_VERSION, "ResourceSlice")})
PROGRESS_EVERY_S = 30.0  # a line this often where stderr is no terminal (CI logs): long waits show their counts


def capacity_step(kube: Kube, selector: str, group: str, dra: bool, run: Run, dropped: Sequence[Taint]) -> Step:
    """A check: it waits and counts, and changes nothing. `dropped`: GPU taints the stack tolerated before this
    run and does not now (their tolerations must leave the device plugin's DaemonSet)."""
    return Step(f"wait-capacity/{group}", lambda: observe_capacity(kube, selector, dra, run.changed, dropped),
                lambda: wait_capacity(kube, selector, run.checks, dra, restart_raced=True, dropped=dropped),
                check=True)


def observe_capacity(kube: Kube, selector: str, dra: bool, after_changes: bool, dropped: Sequence[Taint]) -> Observed:
    """What wait-capacity checks, and whether it would wait: a check, no change. `after_changes`: a step
    before it changes something, so it waits for the nodes to come back, whatever they offer now."""
    state = capacity_check(kube, selector, dra, dropped)
    now = ", ".join(map(str, state.counts))
    if state.ok and not after_changes:
        return Observed(Change.NO_CHANGE, now)
    what = "publish their DRA devices" if dra else "advertise their GPUs"
    return Observed(Change.CHECK, f"waits until the nodes {what} and their plugin is ready (now {now})")


@dataclass(frozen=True)
class CapacityState:
    """One look: the capacity check, the check of what serves it (device plugin or DRA kubelet plugin),
    and the counts of converged nodes and pods that tell progress from a stall."""

    capacity: Check
    agents: Check
    counts: tuple[Count, ...]
    raced: tuple[str, ...] = ()  # Karpenter's nodes whose plugin lost the config race (validate.raced_plugin_nodes)

    @property
    def ok(self) -> bool:
        return self.capacity.ok and self.agents.ok


def capacity_check(kube: Kube, selector: str, dra: bool, dropped: Sequence[Taint]) -> CapacityState:
    """Allocatable against the configuration and the device plugin rolled out and ready; in DRA mode the
    devices the DRA driver's slices publish and its kubelet plugins ready."""
    # The rollout before the nodes: allocatable read after a rollout looked complete is the new plugins' (or
    # the gap a restart left), never the old plugins' count read before they were replaced.
    found = None if dra else device_plugin_rollouts(kube)
    nodes = kube.list("v1", "Node", labels=selector)
    if not nodes:  # a group Karpenter launches, before its first node: nothing serves or waits yet
        none = "no nodes yet (Karpenter launches them for pending pods)"
        return CapacityState(Check("capacity", True, none), Check("device-plugin", True, none), ())
    configs = read_configs(kube)
    if found is None:
        return _dra_check(kube, nodes, configs.mig)
    expected = {n.name: expected_resources(n, configs) for n in nodes}
    counts = [Count("nodes advertise their GPUs", sum(gpu_resources(n) == expected[n.name] for n in nodes),
                    len(nodes))]
    agents = check_device_plugins(kube, found)
    if (rollout := found[1]) is not None:
        stale = check_policy_carried(kube, rollout.name, dropped)
        counts += [Count("device-plugin DaemonSet carries the ClusterPolicy", int(stale is None), 1),
                   Count("device-plugin pods updated", rollout.updated, rollout.desired),
                   Count("ready", min(rollout.ready, rollout.pods_ready), rollout.desired)]
        agents = stale or agents  # the rollout of a DaemonSet about to be rewritten proves nothing
    return CapacityState(check_capacity(nodes, expected), agents, tuple(counts),
                         tuple(raced_plugin_nodes(nodes, expected)))


def check_policy_carried(kube: Kube, daemon_set: str, dropped: Sequence[Taint]) -> Check | None:
    """None when device-plugin DaemonSet `daemon_set` (namespace/name) carries the ClusterPolicy that owns it
    (or no ClusterPolicy owns it: not the GPU Operator's), `dropped`'s tolerations gone; else a failed check
    saying what it lacks yet."""
    namespace, name = daemon_set.split("/", 1)
    try:
        body = kube.get("apps/v1", "DaemonSet", name, namespace)
        owner = next((r["name"] for r in body.metadata.get("ownerReferences") or []
                      if r.get("kind") == "ClusterPolicy"), None)
        if owner is None:
            return None
        policy = kube.get("/".join(CLUSTER_POLICY[:2]), "ClusterPolicy", owner)
    except KubeNotFound:
        return None  # gone meanwhile: the next look reads what replaced it
    wrong = policy_not_carried(policy.spec, body, tolerations(dropped))
    if not wrong:
        return None
    return Check("device-plugin", False, f"{daemon_set} does not carry ClusterPolicy {owner}'s change yet "
                 f"({'; '.join(wrong[:3])}): the GPU Operator rewrites it, then it rolls out; see 'kubectl "
                 f"get clusterpolicy {owner} -o jsonpath={{.status}}' and the operator's log")


def _dra_check(kube: Kube, nodes: list[KubeObject], mig: dict[str, Any]) -> CapacityState:
    published = read_node_devices(kube)
    pods = pods_by_node(kube, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin")

    def publishes(node: KubeObject) -> bool:
        try:
            want = expected_devices(node, mig)
        except ValueError:
            return False
        have = published.get(node.name)
        return have is not None and len(have.devices) == want

    counts = (Count("nodes publish their devices", sum(map(publishes, nodes)), len(nodes)),
              Count("kubelet plugins ready", sum(plugin_state(pods.get(n.name)) == "ready" for n in nodes),
                    len(nodes)))
    return CapacityState(check_dra_capacity(nodes, published, mig), check_kubelet_plugins(nodes, pods), counts)


def wait_capacity(kube: Kube, selector: str, checks: list[Check], dra: bool, timeout: float | None = None,
                  stall: float = STALL_S, restart_raced: bool = False, dropped: Sequence[Taint] = ()) -> Change:
    """Until the nodes offer what was configured (allocatable, or in DRA mode published devices) and the
    device plugin (kubelet plugin) is rolled out and ready; the capacity check is appended to `checks`.
    Ends with WaitTimeout (exit 7) when nothing converges for `stall` seconds, or after `timeout`
    (default: the command's --timeout, gpuctl.util.waiting.wait_limit). `restart_raced` (apply): a node
    Karpenter launched whose plugin has served no GPU for RACE_GRACE_S gets its plugin pod restarted, once.
    `dropped`: as capacity_step's."""
    what = "DRA devices" if dra else "allocatable GPUs"
    where = (f"the DRA driver's kubelet-plugin pods (namespace {DRA_NAMESPACE})" if dra
             else "the device-plugin pods in namespace gpu-operator")
    last: list[CapacityState] = []

    restarted: set[str] = set()

    def look(cached: Kube) -> Look:
        state = capacity_check(cached, selector, dra, dropped)
        if state.ok:  # the caches lag the cluster a moment: the end is what LISTs read now
            state = capacity_check(kube, selector, dra, dropped)
        last[:] = [state]
        if restart_raced and (due := [n for n in state.raced if n not in restarted]):
            restarted.update(restart_raced_plugins(kube, due))
        wrong = state.agents if state.capacity.ok else state.capacity
        return Look(state.ok, state.counts, "" if state.ok else wrong.detail)

    try:
        with cached_lists(kube, CACHED_KINDS) as cached:
            wait_until(f"{what} on nodes {selector}", partial(look, cached), f"check {where}", stall=stall,
                       timeout=timeout, every=PROGRESS_EVERY_S)
    finally:
        if last:
            checks.append(last[0].capacity)
    return Change.NO_CHANGE  # waiting changes nothing; the results are checks


def restart_raced_plugins(kube: Kube, nodes: list[str]) -> list[str]:
    """Delete the device-plugin pod of each of `nodes` that has run for RACE_GRACE_S (a plugin just started
    has not registered yet); its DaemonSet starts a new one, which registers the GPUs. The nodes done."""
    pods = pods_by_node(kube, PLUGIN_SELECTOR, "device-plugin")
    now = datetime.now(timezone.utc)
    done = []
    for node in nodes:
        pod = pods.get(node)
        started = _time(pod.status.get("startTime")) if pod is not None else None
        if pod is None or pod.status.get("phase") != "Running" or started is None \
                or (now - started).total_seconds() < RACE_GRACE_S:
            continue
        info(f"  {node}: {CONFIG_RACE_SHORT}; restarting its device-plugin pod {pod.name}")
        with requesting(f"deleting device-plugin pod {pod.name}"):
            kube.delete("v1", "Pod", pod.name, pod.namespace)  # gone already: its successor registers
        done.append(node)
    return done


def _time(stamp: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, "2026-01-01T00:00:00Z") as an aware datetime; None for none."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
