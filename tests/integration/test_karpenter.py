"""Autoscaled, shared GPU pools on the sim, decided by Karpenter's own controller (sigs.k8s.io/karpenter v1.15.0,
its kwok cloud provider, run beside the cluster by `--karpenter`): pending pods make it launch nodes from
gpuctl's NodePools, the nodes join tainted, labelled and shared, the NodeOverlay sizes a time-sliced node by
what it advertises, the pool's limit holds, empty nodes are consolidated away, and `cluster delete` has
Karpenter terminate its NodeClaims first. Nothing in gpuctl launches, binds or removes a node here."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.kube_api import core, custom

pytestmark = pytest.mark.integration
CLUSTER = "karp"
KARPENTER, NODE_GROUP = "karpenter.sh", "gpuctl.dev/nodegroup"
WAIT_S = 90.0
SPEC = {
    "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": CLUSTER},
    "spec": {"provider": {"cloud": "sim"}, "karpenter": {"enabled": True}, "nodeGroups": [
        {"name": "slices", "gpu": "t4", "nodes": 0, "maxNodes": 3, "sharing": {"timeSlicing": {"replicas": 4}}},
        {"name": "mig", "gpu": "a100-40gb", "nodes": 0, "maxNodes": 1,
         "sharing": {"mig": {"layout": "3g.20gb-2x2g.10gb"}}}]},
}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.support.tools import ensure_tools

    ensure_tools(["karpenter-kwok"], print)  # a first build (minutes on a fresh machine) outside apply's timeout
    root = tmp_path_factory.mktemp("karp")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    spec = root / "cluster.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    proc = run_gpuctl("-o", "json", "apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    env["APPLY"] = proc.stdout
    env["SPEC"] = str(spec)
    yield env
    # delete with a node Karpenter launched: Karpenter, still running, terminates it before the cluster goes
    create_pods(env, "slices", "nvidia.com/gpu", 1)
    wait_for("a launched node", lambda: len(running(env)) == 1)
    launched = len(claims(env))
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"Karpenter terminated {launched} NodeClaim{'' if launched == 1 else 's'}" in proc.stderr


def claims(env: dict[str, str]) -> list[dict[str, Any]]:
    return custom(env).list_cluster_custom_object(KARPENTER, "v1", "nodeclaims")["items"]


def wait_for(what: str, done: Callable[[], bool], timeout: float = WAIT_S) -> float:
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not after {timeout:.0f}s: {what}")
        time.sleep(0.5)
    return time.monotonic() - start


def create_pods(env: dict[str, str], group: str, resource: str, count: int) -> None:
    v1 = core(env)
    for i in range(count):
        v1.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{i}", "labels": {"app": "karpenter-test"}},
            "spec": {"nodeSelector": {NODE_GROUP: group},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {resource: "1"}}}]}})


def pods(env: dict[str, str]) -> list[Any]:
    return core(env).list_namespaced_pod("default", label_selector="app=karpenter-test").items


def running(env: dict[str, str]) -> list[Any]:
    return [p for p in pods(env) if p.status.phase == "Running"]


@pytest.fixture
def from_zero(cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    """No test pods and no Karpenter nodes before and after a test: each starts from an empty pool."""
    def reset() -> None:
        core(cluster).delete_collection_namespaced_pod("default", label_selector="app=karpenter-test",
                                                       grace_period_seconds=0)
        for claim in claims(cluster):
            custom(cluster).delete_cluster_custom_object(KARPENTER, "v1", "nodeclaims", claim["metadata"]["name"])
        wait_for("no NodeClaims and no test pods", lambda: not claims(cluster) and not pods(cluster))

    reset()
    yield cluster
    reset()


def test_apply_runs_karpenter_and_validates_by_launching_a_node(cluster: dict[str, str]) -> None:
    """The groups have no fixed node: validate's smoke test made Karpenter launch one of each, and passed."""
    steps = {s["step"]: s for s in json.loads(cluster["APPLY"])["steps"]}
    assert steps["install-karpenter"]["outcome"] == "created"
    assert steps["apply-karpenter-nodepool"]["outcome"] == "created"
    assert steps["ensure-nodegroup/slices"]["outcome"] == "no change"
    for group in ("slices", "mig"):
        assert steps[f"validate/{group}"]["outcome"] == "passed"
    again = run_gpuctl("-o", "json", "plan", "-f", cluster["SPEC"], env=cluster)
    assert again.returncode == 0, again.stderr
    assert {s["step"]: s["action"] for s in json.loads(again.stdout)}["install-karpenter"] == "no change"
    pools = custom(cluster).list_cluster_custom_object(KARPENTER, "v1", "nodepools")["items"]
    assert sorted(p["metadata"]["name"] for p in pools) == ["gpuctl-mig", "gpuctl-slices"]


def test_plan_says_what_apply_does_to_a_karpenter_whose_instance_types_are_stale(cluster: dict[str, str]) -> None:
    """Instance types written by another gpuctl (the catalog changed): plan names the restart, apply makes it."""
    from tests.support.sim import KwokCluster, get_karpenter_pid, instance_types

    stale = next(KwokCluster(CLUSTER).dir.rglob("instance-types.json"))
    stale.write_text(json.dumps(instance_types()[:1], indent=1, sort_keys=True) + "\n")
    before = get_karpenter_pid(CLUSTER)
    plan = run_gpuctl("-o", "json", "plan", "-f", cluster["SPEC"], env=cluster)
    assert plan.returncode == 0, plan.stderr
    step = {s["step"]: s for s in json.loads(plan.stdout)}["install-karpenter"]
    assert step["action"] == "updated" and "instance types" in step["detail"], step
    applied = run_gpuctl("-o", "json", "apply", "-f", cluster["SPEC"], env=cluster)
    assert applied.returncode == 0, applied.stderr
    assert {s["step"]: s["outcome"] for s in json.loads(applied.stdout)["steps"]}["install-karpenter"] == "updated"
    assert get_karpenter_pid(CLUSTER) not in (None, before)
    again = run_gpuctl("-o", "json", "plan", "-f", cluster["SPEC"], env=cluster)
    assert {s["step"]: s["action"] for s in json.loads(again.stdout)}["install-karpenter"] == "no change"


def test_four_one_slice_pods_run_on_one_launched_node(from_zero: dict[str, str]) -> None:
    env = from_zero
    create_pods(env, "slices", "nvidia.com/gpu", 4)
    wait_for("4 pods running", lambda: len(running(env)) == 4)
    nodes = {p.spec.node_name for p in running(env)}
    assert len(nodes) == 1, nodes
    node = core(env).read_node(nodes.pop())
    labels = node.metadata.labels
    assert labels[NODE_GROUP] == "slices" and labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
    assert labels["nvidia.com/device-plugin.config"] == "slice-4"
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [("nvidia.com/gpu", "NoSchedule")]
    # Karpenter's decision, by the overlay: the first NodeClaim was sized for all four pods
    first = min(claims(env), key=lambda c: c["metadata"]["creationTimestamp"])
    assert first["spec"]["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert first["metadata"]["annotations"]["karpenter.sh/capacity-overlay-applied"] == "true"
    # a node Karpenter launched beside it (docs/testing.md: in-flight accounting) is checked too, once it has joined
    wait_for("every node of the group serving 4 slices", lambda: all(
        (n.status.allocatable or {}).get("nvidia.com/gpu") == "4"
        for n in core(env).list_node(label_selector=f"{NODE_GROUP}=slices").items))
    proc = run_gpuctl("-o", "json", "validate", "--nodegroup", "slices", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    capacity = next(c for c in json.loads(proc.stdout) if c["check"] == "capacity")
    assert "nvidia.com/gpu" in capacity["detail"]


def test_the_pool_limit_holds(from_zero: dict[str, str]) -> None:
    """13 one-slice pods on a pool of at most 3 nodes x 4 slices: 12 run, one stays pending."""
    env = from_zero
    create_pods(env, "slices", "nvidia.com/gpu", 13)
    wait_for("12 pods running", lambda: len(running(env)) == 12)
    [pending] = [p.metadata.name for p in pods(env) if p.status.phase != "Running"]

    seen: list[str] = []

    def limited() -> list[str]:
        """Karpenter's own verdict on the pending pod: its FailedScheduling event naming the pool's limit
        (sigs.k8s.io/karpenter pkg/controllers/provisioning/scheduling/scheduler.go addToNewNodeClaim: the
        node limit, or every instance type over the GPU limit; events.go PodFailedToScheduleEvent)."""
        events = core(env).list_namespaced_event("default", field_selector=f"involvedObject.name={pending}").items
        seen[:] = [f"{e.source.component if e.source else ''} {e.reason}: {e.message}" for e in events]
        return [e.message for e in events if e.reason == "FailedScheduling" and "gpuctl-slices" in (e.message or "")
                and any(limit in e.message for limit in ("node limits have been exhausted for nodepool",
                                                         "all available instance types exceed limits for nodepool"))]

    try:
        wait_for(f"Karpenter's limit event on {pending}", lambda: bool(limited()))
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its events: {seen}") from None
    assert len(running(env)) == 12
    assert len({p.spec.node_name for p in running(env)}) == 3
    assert len([c for c in claims(env) if c["metadata"]["labels"].get(NODE_GROUP) == "slices"]) == 3


def test_empty_nodes_are_consolidated(from_zero: dict[str, str]) -> None:
    env = from_zero
    create_pods(env, "slices", "nvidia.com/gpu", 2)
    wait_for("2 pods running", lambda: len(running(env)) == 2)
    core(env).delete_collection_namespaced_pod("default", label_selector="app=karpenter-test", grace_period_seconds=0)
    wait_for("the empty node consolidated away", lambda: not claims(env), timeout=150)


def test_a_mig_pod_gets_a_p4d_with_the_layout(from_zero: dict[str, str]) -> None:
    env = from_zero
    create_pods(env, "mig", "nvidia.com/mig-3g.20gb", 1)
    wait_for("the MIG pod running", lambda: len(running(env)) == 1, timeout=120)
    node = core(env).read_node(running(env)[0].spec.node_name)
    labels = node.metadata.labels
    assert labels["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
    assert labels["nvidia.com/mig.config"] == "custom-3g.20gb-2x2g.10gb"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert node.status.allocatable["nvidia.com/mig-3g.20gb"] == "8"


def test_without_the_overlay_four_pods_take_four_nodes(from_zero: dict[str, str]) -> None:
    """The control: Karpenter sizes a node by its physical GPU and launches one per one-slice pod."""
    env = from_zero
    overlay = custom(env).get_cluster_custom_object(KARPENTER, "v1alpha1", "nodeoverlays", "gpuctl-slices")
    custom(env).delete_cluster_custom_object(KARPENTER, "v1alpha1", "nodeoverlays", "gpuctl-slices")
    try:
        time.sleep(2)  # Karpenter's nodeoverlay controller re-evaluates the pool's instance types
        create_pods(env, "slices", "nvidia.com/gpu", 4)
        wait_for("4 pods running", lambda: len(running(env)) == 4)
        made = claims(env)
        assert len(made) == 4
        assert all(c["spec"]["resources"]["requests"]["nvidia.com/gpu"] == "1" for c in made)
    finally:
        proc = run_gpuctl("apply", "-f", env["SPEC"], env=env)  # puts the overlay back
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert custom(env).get_cluster_custom_object(KARPENTER, "v1alpha1", "nodeoverlays", "gpuctl-slices")[
            "spec"] == overlay["spec"]


def test_a_launched_node_whose_plugin_lost_the_config_race_is_named_and_restarted(from_zero: dict[str, str]) -> None:
    """NVIDIA/k8s-device-plugin #1645, turned on for the pool's nodes by the sim's fault annotation: a launched
    node advertises no GPU. validate names the cause; apply restarts that node's plugin pod once, and it serves."""
    from tests.support.sim import CONFIG_RACE

    env = from_zero
    pool = ("karpenter.sh", "v1", "nodepools", "gpuctl-slices")
    patch: dict[str, Any] = {"spec": {"template": {"metadata": {"annotations": {CONFIG_RACE: "true"}}}}}
    custom(env).patch_cluster_custom_object(*pool, patch)
    try:
        create_pods(env, "slices", "nvidia.com/gpu", 1)

        def raced() -> bool:
            nodes = core(env).list_node(label_selector=f"{NODE_GROUP}=slices").items
            return any("sim.gpuctl.dev/device-plugin-loaded" in (n.metadata.annotations or {}) for n in nodes)

        wait_for("a launched node whose plugin loaded", raced)
        node = core(env).list_node(label_selector=f"{NODE_GROUP}=slices").items[0]
        assert node.status.allocatable.get("nvidia.com/gpu", "0") == "0"
        proc = run_gpuctl("-o", "json", "validate", "--nodegroup", "slices", "--timeout", "5", env=env)
        assert proc.returncode != 0
        capacity = next(c for c in json.loads(proc.stdout) if c["check"] == "capacity")
        assert not capacity["ok"] and "NVIDIA/k8s-device-plugin #1645" in capacity["detail"], capacity
        proc = run_gpuctl("apply", "-f", env["SPEC"], env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"{node.metadata.name}: launched by Karpenter" in proc.stderr
        assert core(env).read_node(node.metadata.name).status.allocatable["nvidia.com/gpu"] == "4"
        wait_for("the pod running", lambda: len(running(env)) == 1)
    finally:
        patch["spec"]["template"]["metadata"]["annotations"][CONFIG_RACE] = None
        custom(env).patch_cluster_custom_object(*pool, patch)
