"""Waits that last while things converge (gpuctl.util.waiting) and what uses them: the capacity wait, the
MIG-state wait and the device-plugin rollout check. A fake clock: no test sleeps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuctl.kube.cached_lists import CachedLists
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject, kube_objects
from gpuctl.ops.platform import capacity
from gpuctl.ops.smoke import Check
from gpuctl.ops.validate import Rollout
from gpuctl.util.errors import ClusterError, ExitCode, WaitTimeout
from gpuctl.util.waiting import STALL_S, Count, Look, wait_limit, wait_until


class FakeTime:
    """time.monotonic and time.sleep: sleeping moves the clock, a look may cost time too."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr("gpuctl.util.waiting.time", fake)
    return fake


def nodes_converging(clock: FakeTime, total: int, every: float, stop_at: int | None = None) -> Callable[[], Look]:
    """One more node converges every `every` seconds (up to `stop_at`, then none)."""
    started = clock.now

    def look() -> Look:
        done = min(total, int((clock.now - started) // every), total if stop_at is None else stop_at)
        return Look(done == total, (Count("nodes advertise their GPUs", done, total),), f"{total - done} nodes wrong")

    return look


def test_progress_keeps_a_wait_alive_past_the_stall_period(clock: FakeTime) -> None:
    # 1,000 nodes, one every 0.9 s: 15 minutes, far past the 120 s stall period, never 120 s without progress
    look = nodes_converging(clock, 1000, every=0.9)
    seen = wait_until("allocatable GPUs on nodes gpu", look, "check the pods")
    assert seen.finished and seen.counts[0].done == 1000
    assert clock.now - 1000.0 > 7 * STALL_S


def test_slow_but_steady_progress_is_not_a_stall(clock: FakeTime) -> None:
    look = nodes_converging(clock, 5, every=STALL_S - 1)  # each node just inside the stall period
    assert wait_until("x", look, "hint").finished


def test_a_stall_ends_the_wait_with_exit_7_naming_what_stalled_and_the_counts(clock: FakeTime) -> None:
    look = nodes_converging(clock, 1000, every=0.1, stop_at=484)  # 484 nodes in 48 s, then nothing
    with pytest.raises(WaitTimeout) as caught:
        wait_until("allocatable GPUs on nodes gpuctl.dev/nodegroup=gpu", look, "check the device-plugin pods")
    err = caught.value
    assert err.exit_code == ExitCode.TIMEOUT == 7
    assert err.message.startswith("allocatable GPUs on nodes gpuctl.dev/nodegroup=gpu: no progress for 120s")
    assert "484/1000 nodes advertise their GPUs; 516 nodes wrong" in err.message
    assert err.hint == "check the device-plugin pods"
    stalled_at = 1000.0 + 48.4  # the last node converged about then
    assert stalled_at + STALL_S <= clock.now <= stalled_at + STALL_S + 1


def test_nothing_converging_at_all_stalls_after_the_stall_period(clock: FakeTime) -> None:
    with pytest.raises(WaitTimeout, match=r"no progress for 30s \(after 30s\): 0/2 nodes"):
        wait_until("x", nodes_converging(clock, 2, every=1, stop_at=0), "hint", stall=30)
    assert clock.now == pytest.approx(1030.0)


def test_timeout_caps_a_wait_that_still_progresses(clock: FakeTime) -> None:
    look = nodes_converging(clock, 1000, every=1.0)
    with pytest.raises(WaitTimeout) as caught:
        wait_until("allocatable GPUs", look, "hint", timeout=300)
    assert caught.value.exit_code == ExitCode.TIMEOUT
    assert caught.value.message.startswith("allocatable GPUs: not done after 300s: ")
    assert "/1000 nodes advertise their GPUs" in caught.value.message
    assert clock.now == pytest.approx(1300.0)  # never slept past the limit


def test_the_commands_timeout_caps_every_wait_in_it_and_the_shorter_limit_wins(clock: FakeTime) -> None:
    with wait_limit(60), pytest.raises(WaitTimeout, match="not done after 60s"):
        wait_until("x", nodes_converging(clock, 1000, every=1.0), "hint")
    with wait_limit(600), pytest.raises(WaitTimeout, match="not done after 45s"):
        wait_until("x", nodes_converging(clock, 1000, every=1.0), "hint", timeout=45)
    with wait_limit(None):  # no --timeout: only a stall ends it
        assert wait_until("x", nodes_converging(clock, 300, every=1.0), "hint").finished


def test_a_count_that_falls_and_rises_again_is_progress(clock: FakeTime) -> None:
    # A device-plugin restart: the first look still counts 10 ready (the pods are being deleted), then 0,
    # then they come back one every 20 s: 200 s below the old best, yet never 120 s without progress.
    ready = [10, 0, *[n for n in range(1, 11) for _ in range(40)]]
    looks = iter(enumerate(ready))

    def look() -> Look:
        index, n = next(looks)
        return Look(index > 0 and n == 10, (Count("device-plugin pods ready", n, 10),))

    assert wait_until("x", look, "hint").finished
    assert clock.now - 1000.0 > STALL_S


def test_a_slow_look_is_followed_by_as_long_a_pause(clock: FakeTime) -> None:
    looks = iter([False, False, True])

    def look() -> Look:
        clock.now += 3.0  # listing 1,000 nodes takes a while
        return Look(next(looks), (Count("nodes", 0, 1),))

    wait_until("x", look, "hint")
    assert clock.slept == [3.0, 3.0]


# -- the capacity wait ---------------------------------------------------------------------------------


def states(*looks: tuple[bool, bool, int]) -> Iterator[capacity.CapacityState]:
    for capacity_ok, agents_ok, nodes in looks:
        yield capacity.CapacityState(Check("capacity", capacity_ok, f"{1000 - nodes} nodes have none"),
                                     Check("device-plugin", agents_ok, "gpu-operator/nvidia-device-plugin-daemonset: "
                                           "rollout: 4 of 5 pods updated"),
                                     (Count("nodes advertise their GPUs", nodes, 1000),))


def test_the_capacity_wait_lasts_while_nodes_converge_and_then_checks_the_rollout(
        clock: FakeTime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The looks read the watches' caches; where they say done, LISTs must say so too (the caches lag a moment)."""
    looks = states(*[(False, False, n) for n in range(0, 1000, 2)], (True, False, 1000),
                   (True, True, 1000), (True, False, 1000),  # cached done, not yet for the LISTs
                   (True, True, 1000), (True, True, 1000))
    read: list[bool] = []

    def look(client: Kube, selector: str, dra: bool, dropped: object) -> capacity.CapacityState:
        read.append(isinstance(client, CachedLists))
        return next(looks)

    monkeypatch.setattr(capacity, "capacity_check", look)
    checks: list[Check] = []
    capacity.wait_capacity(Kube(None), "gpuctl.dev/nodegroup=gpu", checks, dra=False)
    assert [c.ok for c in checks] == [True]
    assert clock.now - 1000.0 > STALL_S  # 250 s of steady progress
    assert read[-5:] == [True, True, False, True, False] and all(read[:-5])


def test_a_stalled_rollout_ends_the_capacity_wait_with_exit_7(clock: FakeTime, monkeypatch: pytest.MonkeyPatch) -> None:
    import itertools

    looks = itertools.chain(states((False, False, 990)), itertools.repeat(next(states((True, False, 1000)))))
    monkeypatch.setattr(capacity, "capacity_check", lambda client, selector, dra, dropped: next(looks))
    checks: list[Check] = []
    with pytest.raises(WaitTimeout) as caught:
        capacity.wait_capacity(Kube(None), "gpuctl.dev/nodegroup=gpu", checks, dra=False)
    assert caught.value.message == (
        "allocatable GPUs on nodes gpuctl.dev/nodegroup=gpu: no progress for 120s (after 120s): 1000/1000 nodes "
        "advertise their GPUs; gpu-operator/nvidia-device-plugin-daemonset: rollout: 4 of 5 pods updated")
    assert caught.value.hint == "check the device-plugin pods in namespace gpu-operator"
    assert [c.ok for c in checks] == [True]  # the last capacity check is still reported


def test_the_capacity_wait_takes_the_commands_timeout(clock: FakeTime, monkeypatch: pytest.MonkeyPatch) -> None:
    looks = states(*[(False, False, n) for n in range(1000)])
    monkeypatch.setattr(capacity, "capacity_check", lambda client, selector, dra, dropped: next(looks))
    with wait_limit(30), pytest.raises(WaitTimeout, match="not done after 30s: 60/1000 nodes"):
        capacity.wait_capacity(Kube(None), "g", [], dra=False)


# -- the MIG-state wait ---------------------------------------------------------------------------------


class FakeNodes(Kube):
    """Kube.list of nodes: node i reaches `success` at look `reach[i]` (None: stays pending)."""

    def __init__(self, reach: list[int | None], failed: int | None = None) -> None:
        super().__init__(None)
        self.reach, self.failed, self.looks = reach, failed, 0

    def list(self, api_version: str, kind: str, namespace: str | None = None, **_: Any) -> list[KubeObject]:
        assert (api_version, kind) == ("v1", "Node")
        self.looks += 1
        items = []
        for i, at in enumerate(self.reach):
            state = "success" if at is not None and self.looks >= at else "pending"
            if i == self.failed and self.looks > 2:
                state = "failed"
            items.append({"metadata": {"name": f"gpu-{i}", "labels": {"nvidia.com/mig.config.state": state}}})
        items.append({"metadata": {"name": "cpu-0", "labels": {}}})
        return kube_objects(items)


def test_the_mig_wait_lasts_while_nodes_reach_success(clock: FakeTime) -> None:
    from gpuctl.ops.platform.mig import wait_for_mig_state

    # one node every 100 looks (50 s): 10 nodes in 500 s, past the stall period, under no limit
    v1 = FakeNodes([100 * (i + 1) for i in range(10)])
    assert wait_for_mig_state(v1, [f"gpu-{i}" for i in range(10)], "custom-3g.20gb", None).value == "passed"
    assert clock.now - 1000.0 > 3 * STALL_S


def test_the_mig_wait_stalls_naming_the_pending_nodes(clock: FakeTime) -> None:
    from gpuctl.ops.platform.mig import wait_for_mig_state

    v1 = FakeNodes([1, 1, None])
    with pytest.raises(WaitTimeout) as caught:
        wait_for_mig_state(v1, ["gpu-0", "gpu-1", "gpu-2"], "custom-3g.20gb", 300)
    assert caught.value.message == ("nvidia.com/mig.config.state=success: no progress for 120s (after 120s): "
                                    "2/3 nodes at nvidia.com/mig.config.state=success; MIG config custom-3g.20gb "
                                    "pending on gpu-2 (pending)")
    assert caught.value.exit_code == ExitCode.TIMEOUT


def test_the_mig_wait_keeps_its_limit_and_fails_fast_on_failed(clock: FakeTime) -> None:
    from gpuctl.ops.platform.mig import wait_for_mig_state

    with pytest.raises(WaitTimeout, match="not done after 20s"):
        wait_for_mig_state(FakeNodes([i * 10 for i in range(1, 100)]), [f"gpu-{i}" for i in range(99)], "c", 20)
    with pytest.raises(ClusterError, match="failed to apply c on gpu-1"):
        wait_for_mig_state(FakeNodes([None, None], failed=1), ["gpu-0", "gpu-1"], "c", None)


# -- the device-plugin rollout, as kubectl rollout status judges it -------------------------------------


def rollout(**changes: Any) -> Rollout:
    done = dict(name="gpu-operator/nvidia-device-plugin-daemonset", desired=5, updated=5, available=5, ready=5,
                pods_ready=5, observed=True, rolling=True)
    return Rollout(**{**done, **changes})


@pytest.mark.parametrize(("changes", "waiting_for"), [
    ({}, None),
    ({"observed": False}, "waiting for the DaemonSet spec update to be observed"),
    ({"updated": 4}, "rollout: 4 of 5 pods updated"),
    ({"available": 4}, "rollout: 4 of 5 updated pods available"),
    ({"ready": 4}, "4 of 5 pods ready"),
    # the controller still counts 5 ready, but the pods were just deleted (a device-plugin restart)
    ({"pods_ready": 0}, "0 of 5 pods ready"),
    ({"desired": 0, "updated": 0, "available": 0, "ready": 0, "pods_ready": 0}, "0 of 0 pods ready (no node runs it yet)"),
    ({"updated": 1, "rolling": False}, None),  # OnDelete: old pods stay until deleted
])
def test_a_rollout_is_done_only_as_kubectl_rollout_status_says(changes: dict[str, Any], waiting_for: str | None) -> None:
    assert rollout(**changes).waiting_for() == waiting_for


def test_check_device_plugins_fails_on_a_half_rolled_daemon_set() -> None:
    from gpuctl.ops.validate import check_device_plugins

    names = ["gpu-operator/nvidia-device-plugin-daemonset"]
    check = check_device_plugins(Kube(None), (names, rollout(updated=4)))
    assert not check.ok and check.detail.startswith(
        "gpu-operator/nvidia-device-plugin-daemonset: rollout: 4 of 5 pods updated; see 'kubectl rollout status -n "
        "gpu-operator ds/nvidia-device-plugin-daemonset'")
    assert check_device_plugins(Kube(None), (names, rollout())).ok
    two = check_device_plugins(Kube(None), ([*names, "kube-system/nvidia-device-plugin-daemonset"], None))
    assert not two.ok and "found 2" in two.detail


def test_a_pod_being_deleted_or_not_ready_does_not_count_though_the_status_still_does() -> None:
    from gpuctl.ops.validate import daemon_set_rollout

    def pod(node: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
        meta = {"name": f"plugin-{node}", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
        return {"metadata": meta, "spec": {"nodeName": node},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}

    asked: list[tuple[str | None, str]] = []

    class Pods(Kube):
        def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
                 **_: Any) -> list[KubeObject]:
            asked.append((namespace, labels))
            return kube_objects([pod("gpu-0", True), pod("gpu-1", True, deleting=True), pod("gpu-2", False),
                                 pod("gpu-0", True)])

    ds = KubeObject(  # a DaemonSet as read
        apiVersion="apps/v1", kind="DaemonSet",
        metadata={"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator", "generation": 2},
        spec={"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
              "updateStrategy": {"type": "RollingUpdate"}},
        status={"desiredNumberScheduled": 3, "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3,
                "observedGeneration": 2})
    seen = daemon_set_rollout(Pods(None), ds)
    assert asked == [("gpu-operator", "app=nvidia-device-plugin-daemonset")]
    assert (seen.ready, seen.pods_ready, seen.observed, seen.rolling) == (3, 1, True, True)
    assert seen.waiting_for() == "1 of 3 pods ready"
    ds["metadata"]["generation"] = 3  # a new template the controller has not seen yet
    assert daemon_set_rollout(Pods(None), ds).waiting_for() == "waiting for the DaemonSet spec update to be observed"
