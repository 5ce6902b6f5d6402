"""A failed GPU in DRA mode on one sim cluster (1 T4 node with 2 GPUs, `--dra`), through the real CLI, as issue 32
asks: an XID 79 on the GPU a Deployment's pod was allocated. The sim's DRA kubelet plugin taints the device as
NVIDIA's DRA driver v0.4.1 does with its NVMLDeviceHealthCheck gate on (gpu.nvidia.com/xid=79:NoSchedule, kept
until the plugin restarts). `doctor` names node, GPU, UUID and XID (exit 6); `doctor --fix` makes gpuctl's
DeviceTaintRule gpuctl-<node>-gpu-<i> (NoSchedule) and evicts the pod through the Eviction API; its replacement is
allocated the other GPU by the scheduler. A claim that tolerates the driver's taint and not gpuctl's stays
unallocated with the scheduler's reason; one that tolerates both gets the tainted GPU (the rule is what held the
first). An XID 48 on the other GPU with `--fix --taint-effect NoExecute`: kube-controller-manager deletes the pod
using it. Faults cleared (the GPUs reset): the driver still holds its taints; `doctor --fix` restarts its kubelet
plugin, deletes only gpuctl's rules (another's stays), doctor exits 0 and the Deployment's pod runs again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import SimCluster, await_value, own_cluster
from tests.output_contract import faults, parsed

pytestmark = pytest.mark.integration

NAME = "dtaint"
NODE = "gpu-0"
FAULT = "sim.gpuctl.dev/fault-xid"
NS = "apps"
RULES = "devicetaintrules.resource.k8s.io"
TOLERATE_NODES = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
DRIVER_TAINT = {"key": "gpu.nvidia.com/xid", "operator": "Exists"}
GPUCTL_TAINT = {"key": "gpuctl.dev/gpu-failed", "operator": "Exists"}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    with own_cluster(sim_env, tmp_path_factory, NAME, "--gpu", "t4", "--nodes", "1", "--gpus-per-node", "2",
                     "--dra") as made:
        yield made


def apply(cluster: SimCluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def template(name: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def pod_spec(claim_template: str) -> dict[str, Any]:
    return {"tolerations": TOLERATE_NODES, "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
            "containers": [{"name": "main", "image": "busybox:1.37", "resources": {"claims": [{"name": "gpu"}]}}]}


def pods(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    """name -> uid, phase, the device its claim was allocated, the scheduler's PodScheduled condition."""
    items = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
    claims = {c["metadata"]["name"]: c for c in
              json.loads(cluster.kubectl("get", "resourceclaims", "-n", NS, "-o", "json"))["items"]}
    found = {}
    for p in items:
        if p["metadata"].get("deletionTimestamp"):
            continue
        names = [s.get("resourceClaimName") for s in p.get("status", {}).get("resourceClaimStatuses") or []]
        results = [r for n in names if n in claims
                   for r in ((claims[n].get("status") or {}).get("allocation") or {}).get("devices", {}).get(
                       "results", [])]
        scheduled: dict[str, Any] = next(
            (c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})
        found[p["metadata"]["name"]] = {
            "uid": p["metadata"]["uid"], "app": (p["metadata"].get("labels") or {}).get("app"),
            "phase": p.get("status", {}).get("phase"), "device": results[0]["device"] if results else None,
            "scheduled": (scheduled.get("status"), scheduled.get("reason"), scheduled.get("message", ""))}
    return found


def train(cluster: SimCluster) -> dict[str, Any] | None:
    """The Deployment's one pod (None when there is none, or more than one)."""
    mine = [p for p in pods(cluster).values() if p["app"] == "train"]
    return mine[0] if len(mine) == 1 else None


def device_taints(cluster: SimCluster) -> dict[str, list[str]]:
    """The node's published devices -> their taints, key=value:effect."""
    slices = json.loads(cluster.kubectl("get", "resourceslices", "-o", "json"))["items"]
    return {d["name"]: [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in d.get("taints") or []]
            for s in slices if s["spec"].get("nodeName") == NODE for d in s["spec"].get("devices") or []}


def rules(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in json.loads(cluster.kubectl("get", RULES, "-o", "json"))["items"]}


def doctor(cluster: SimCluster, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = cluster.gpuctl("-o", "json", "doctor", *args)
    data = parsed(proc.stdout, "json")
    assert faults(data) == [] and "Traceback" not in proc.stderr, (proc.stderr, data)
    return proc.returncode, data, proc.stderr


def test_a_failed_gpu_is_tainted_its_pods_moved_and_the_rule_removed_once_healthy(cluster: SimCluster) -> None:
    await_value("the node's two GPUs published untainted", lambda: device_taints(cluster),
                {"gpu-0": [], "gpu-1": []}, timeout=60)
    cluster.kubectl("create", "namespace", NS)
    foreign = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "someone-elses"},
               "spec": {"deviceSelector": {"driver": "example.com", "pool": "nowhere", "device": "none"},
                        "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}}
    apply(cluster, template("gpu", []), template("tolerates-driver", [DRIVER_TAINT]),
          template("tolerates-both", [DRIVER_TAINT, GPUCTL_TAINT]),
          {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "train", "namespace": NS},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "train"}},
                    "template": {"metadata": {"labels": {"app": "train"}}, "spec": pod_spec("gpu")}}})
    await_value("the Deployment's pod running on a GPU",
                lambda: (p := train(cluster)) is not None and p["phase"] == "Running" and p["device"] is not None,
                True)
    first = train(cluster)
    assert first is not None
    failed = first["device"]
    other = "gpu-1" if failed == "gpu-0" else "gpu-0"
    index = int(failed.removeprefix("gpu-"))

    # XID 79 on the pod's GPU: the driver taints its device; doctor names node, GPU, UUID and XID
    cluster.kubectl("annotate", "node", NODE, f"{FAULT}={index}:79")
    await_value("the driver's taint on the failed GPU's device", lambda: device_taints(cluster),
                {failed: ["gpu.nvidia.com/xid=79:NoSchedule"], other: []})
    code, found, _ = doctor(cluster)
    assert code == 6 and [(f["check"], f["node"], f["gpu"]) for f in found] == [("gpu-failed", NODE, index)], found
    evidence = found[0]["evidence"]
    assert (evidence["device"], evidence["xid"], evidence["meaning"], evidence["rule"]) == (
        failed, 79, "GPU has fallen off the bus", None)
    assert evidence["uuid"].startswith("GPU-") and f"gpuctl-{NODE}-{failed}" in found[0]["repair"]

    # --fix: gpuctl's rule (NoSchedule), in force; the pod evicted; its replacement gets the other GPU
    apply(cluster, foreign)
    code, found, said = doctor(cluster, "--fix", "--grace", "60")
    assert code == 6 and [f["evidence"]["rule"] for f in found] == [f"gpuctl-{NODE}-{failed}"], (said, found)
    assert f"tainting device {failed} with DeviceTaintRule gpuctl-{NODE}-{failed} (effect NoSchedule" in said, said
    assert f"evicting GPU pod {NS}/" in said, said
    assert "in force (OtherEffect: Eviction only happens for the NoExecute effect.)" in said, said  # kcm's words
    rule = rules(cluster)[f"gpuctl-{NODE}-{failed}"]
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"}
    assert rule["spec"] == {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": failed},
                            "taint": {"key": "gpuctl.dev/gpu-failed", "value": "79", "effect": "NoSchedule",
                                      "timeAdded": rule["spec"]["taint"]["timeAdded"]}}
    await_value("the replacement running on the other GPU",
                lambda: (p := train(cluster)) is not None and (p["uid"] != first["uid"], p["phase"], p["device"]),
                (True, "Running", other))

    # only the tainted GPU is free: a claim that tolerates the driver's taint but not gpuctl's stays unallocated,
    # one that tolerates both is allocated it (so gpuctl's rule is what holds the first)
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "driver-only", "namespace": NS},
                    "spec": pod_spec("tolerates-driver")})
    await_value("the scheduler's refusal", lambda: pods(cluster)["driver-only"]["scheduled"][:2],
                ("False", "Unschedulable"))
    waiting = pods(cluster)["driver-only"]
    assert (waiting["phase"], waiting["device"]) == ("Pending", None), waiting
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "both", "namespace": NS},
                    "spec": pod_spec("tolerates-both")})
    await_value("the pod tolerating both taints on the failed GPU",
                lambda: (pods(cluster)["both"]["device"], pods(cluster)["both"]["phase"]), (failed, "Running"))
    assert pods(cluster)["driver-only"]["device"] is None  # still: the failed GPU is taken now anyway
    cluster.kubectl("delete", "pod", "-n", NS, "both", "driver-only", "--wait=true")

    # NoExecute: XID 48 on the other GPU, the replacement's: kube-controller-manager deletes it
    moved = train(cluster)
    assert moved is not None
    cluster.kubectl("annotate", "node", NODE, f"{FAULT}={index}:79,{1 - index}:48", "--overwrite")
    await_value("the driver's taints on both devices", lambda: device_taints(cluster),
                {failed: ["gpu.nvidia.com/xid=79:NoSchedule"], other: ["gpu.nvidia.com/xid=48:NoSchedule"]})
    code, found, said = doctor(cluster, "--fix", "--taint-effect", "NoExecute")
    assert code == 6 and sorted(f["evidence"]["ruleEffect"] for f in found) == ["NoExecute", "NoSchedule"], found
    assert f"kube-controller-manager deleted the pods that used the tainted devices (NoExecute): {NS}/" in said, said
    assert "evicting" not in said and "restarting DRA kubelet-plugin" not in said, said
    assert rules(cluster)[f"gpuctl-{NODE}-{other}"]["spec"]["taint"]["effect"] == "NoExecute"
    now = train(cluster)
    assert now is not None and now["uid"] != moved["uid"] and now["device"] is None, now  # no GPU for it

    # the GPUs reset: the driver still holds its taints (until its plugin restarts); --fix restarts it, deletes
    # only gpuctl's rules, and the Deployment's pod gets a GPU again
    cluster.kubectl("annotate", "node", NODE, f"{FAULT}-")
    code, found, _ = doctor(cluster)
    assert code == 6 and sorted(f["gpu"] for f in found) == [0, 1], found
    code, found, said = doctor(cluster, "--fix")
    assert code == 0 and found == [], (said, found)
    assert "restarting DRA kubelet-plugin pod" in said, said
    for device in (failed, other):
        assert f"deleting gpuctl's DeviceTaintRule gpuctl-{NODE}-{device}" in said, said
    assert set(rules(cluster)) == {"someone-elses"}
    assert device_taints(cluster) == {"gpu-0": [], "gpu-1": []}
    await_value("the Deployment's pod running on a GPU again",
                lambda: (p := train(cluster)) is not None and (p["phase"], p["device"] is not None), ("Running", True))
    assert doctor(cluster)[0] == 0


def test_taint_effect_is_refused_without_fix_and_when_wrong(cluster: SimCluster) -> None:
    for args, why in ((("--taint-effect", "NoExecute"), "add --fix"), (("--fix", "--taint-effect", "None"), "NoSchedule")):
        proc = cluster.gpuctl("doctor", *args)
        assert proc.returncode == 2 and "--taint-effect" in proc.stderr and why in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
