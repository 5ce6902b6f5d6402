"""The sim device plugin's health check on XID faults (gpuctl.simulator.xid), held to k8s-device-plugin v0.20.0
internal/rm/health.go: the application XIDs ignored, DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS, a MIG
device marked only by its own GPU instance's event; and the XID DCGM reports for each device."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.catalog import get_gpu
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.simulator.nodes import render_node
from gpuctl.simulator.operands import Policy
from gpuctl.simulator.operator import LOADED, SimOperator
from gpuctl.simulator.xid import (
    FAULT_XID,
    IGNORED_XIDS,
    XID_DECISIONS,
    SimDevice,
    XidFault,
    last_xid,
    mark_unhealthy,
    parse_faults,
)

GPUS = [SimDevice(i, "nvidia.com/gpu") for i in range(4)]
# GPU 0 in MIG mode (mixed): two 3g.20gb (GI 1, 2) and one 1g.5gb (GI 7); GPU 1 whole.
MIG = [SimDevice(0, "nvidia.com/mig-3g.20gb", 1), SimDevice(0, "nvidia.com/mig-3g.20gb", 2),
       SimDevice(0, "nvidia.com/mig-1g.5gb", 7), SimDevice(1, "nvidia.com/gpu")]


def faults(text: str) -> list[XidFault]:
    found, bad = parse_faults(text)
    assert bad == []
    return found


def test_xid_79_marks_its_gpu_only() -> None:
    marked, decisions = mark_unhealthy(faults("1:79"), GPUS, {})
    assert marked == {"1"}
    assert decisions == {"1:79": "unhealthy: nvidia.com/gpu 1"}


def test_the_ignored_xids_are_upstreams_six() -> None:
    assert IGNORED_XIDS == {13, 31, 43, 45, 68, 109}  # health.go ignoredXids


@pytest.mark.parametrize("xid", sorted(IGNORED_XIDS))
def test_application_xids_mark_nothing(xid: int) -> None:
    marked, decisions = mark_unhealthy(faults(f"2:{xid}"), GPUS, {})
    assert marked == set()
    assert decisions == {f"2:{xid}": f"ignored: XID {xid} is an application XID"}


def test_disable_healthchecks_names_more_xids_and_enable_wins() -> None:
    env = {"DP_DISABLE_HEALTHCHECKS": "79, 48,bogus"}
    marked, decisions = mark_unhealthy(faults("0:79,1:48,2:74"), GPUS, env)
    assert marked == {"2"}
    assert decisions["0:79"] == "ignored: XID 79 is DP_DISABLE_HEALTHCHECKS"
    marked, _ = mark_unhealthy(faults("0:79,1:48"), GPUS, {**env, "DP_ENABLE_HEALTHCHECKS": "48"})
    assert marked == {"1"}


@pytest.mark.parametrize("value", ["all", "xids", "ALL", "13,xids"])
def test_all_disabled_marks_nothing(value: str) -> None:
    marked, decisions = mark_unhealthy(faults("0:79"), GPUS, {"DP_DISABLE_HEALTHCHECKS": value})
    assert marked == set()
    assert decisions["0:79"].startswith("ignored: health checks disabled")


def test_all_disabled_checks_nothing_even_with_one_enabled() -> None:
    # health.go's comment says an enabled XID is checked when all are disabled, but its code does not:
    # checkHealth returns at once when IsAllDisabled(), and disabled[allXIDs] stays true (health_test.go
    # "disabled is all": expectedAllDisabled true). The sim follows the code.
    env = {"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}
    assert mark_unhealthy(faults("0:79,1:48"), GPUS, env)[0] == set()


def test_enable_all_reenables_even_the_application_xids() -> None:
    # health.go IsDisabled: DP_ENABLE_HEALTHCHECKS=all sets disabled[allXIDs]=false, and every XID counts
    assert mark_unhealthy(faults("3:13"), GPUS, {"DP_ENABLE_HEALTHCHECKS": "all"})[0] == {"3"}


def test_a_mig_event_marks_only_its_gpu_instance() -> None:
    marked, decisions = mark_unhealthy(faults("0/2:48"), MIG, {})
    assert marked == {"0/2"}
    assert decisions == {"0/2:48": "unhealthy: nvidia.com/mig-3g.20gb 0/2"}


def test_a_whole_gpu_event_on_a_mig_gpu_marks_one_device_per_profile() -> None:
    marked, _ = mark_unhealthy(faults("0:79"), MIG, {})
    assert marked == {"0/1", "0/7"}  # parentToDeviceMap keeps one device per GPU and resource


def test_an_instance_that_is_not_there_marks_nothing_and_an_instance_event_on_a_whole_gpu_marks_it() -> None:
    marked, decisions = mark_unhealthy(faults("0/5:48,1/3:48,7:79"), MIG, {})
    assert marked == {"1"}
    assert decisions["0/5:48"] == decisions["7:79"] == "ignored: no such device on this node"


def test_malformed_entries_are_set_apart() -> None:
    found, bad = parse_faults(" 1:79 ,x:1,2:,3/a:48,,4/1:94")
    assert found == [XidFault(1, None, 79), XidFault(4, 1, 94)]
    assert bad == ["x:1", "2:", "3/a:48"]


def test_dcgm_reports_each_devices_last_xid_whatever_the_plugin_decided() -> None:
    found = faults("1:13,1:79,0/2:48")
    assert last_xid(found, 1, None) == 79
    assert last_xid(found, 0, 2) == 48 and last_xid(found, 0, 1) == 0
    assert last_xid(found, 3, None) == 0


# -- the sim's operator: the plugin's decision and the kubelet's count on the node -----------------------------


class RecordingKube:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any], namespace: str | None = None,
              *, subresource: str | None = None, **_: Any) -> KubeObject:
        self.calls.append(("status" if subresource == "status" else "meta", body))
        return KubeObject({"metadata": {"name": name, "resourceVersion": str(len(self.calls) + 1)}})


def reconcile(fault: str | None, env: dict[str, str] | None = None,
              unhealthy: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One pass of the sim's operator on a T4 node of 4 GPUs served by a plugin pod, no sharing: (the node's
    annotations written, its status written)."""
    body = render_node(NodeGroupSpec("gpu", get_gpu("t4"), 1, 4), 0)
    policy = Policy("cluster-policy", "uid", {})
    state = json.dumps(["", policy.mig_strategy, policy.plugin_config, False])
    loaded = {"pod": "pod-uid", "inputs": hashlib.sha256(state.encode()).hexdigest()[:12], "strategy": "none",
              "replicas": 1, "error": None, **({"unhealthy": unhealthy} if unhealthy else {})}
    annotations = {LOADED: json.dumps(loaded, sort_keys=True), **({FAULT_XID: fault} if fault else {})}
    node = KubeObject({"metadata": {"name": "gpu-0", "labels": body["metadata"]["labels"],
                                    "annotations": annotations, "resourceVersion": "1"},
                       "spec": {"taints": []},
                       "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}})
    pod = KubeObject({"metadata": {"name": "plugin", "uid": "pod-uid"}, "spec": {"containers": [
        {"name": L.DEVICE_PLUGIN_APP, "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}})
    operator = SimOperator.__new__(SimOperator)
    kube = RecordingKube()
    operator.kube = kube  # type: ignore[assignment]
    operator.mig_seen, operator.mig_answers = set(), {}
    operator._reconcile_node(node, policy, "", None, "", pod)
    meta = {k: v for kind, b in kube.calls if kind == "meta" for k, v in b["metadata"].get("annotations", {}).items()}
    status: dict[str, Any] = next((b["status"] for kind, b in kube.calls if kind == "status"), {})
    return meta, status


def test_the_sim_plugin_takes_a_failed_gpu_out_of_allocatable_and_keeps_it_in_capacity() -> None:
    meta, status = reconcile("1:79")
    assert status == {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "3"}}
    assert json.loads(meta[XID_DECISIONS]) == {"1:79": "unhealthy: nvidia.com/gpu 1"}
    assert json.loads(meta[LOADED])["unhealthy"] == ["1"]


def test_the_sim_plugin_ignores_an_application_xid_and_a_disabled_one() -> None:
    meta, status = reconcile("1:13")
    assert status == {} and json.loads(meta[XID_DECISIONS]) == {"1:13": "ignored: XID 13 is an application XID"}
    meta, status = reconcile("1:79", env={"DP_DISABLE_HEALTHCHECKS": "79"})
    assert status == {} and LOADED not in meta


def test_a_cleared_fault_stays_unhealthy_until_the_plugin_restarts() -> None:
    meta, status = reconcile(None, unhealthy=["1"])  # the same plugin pod: no way back (server.go)
    assert status == {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "3"}}
