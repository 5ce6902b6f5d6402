"""A running two-group cluster moves one node group from the device plugin to DRA with `apply` (the group's
`dra: true`), and back with the old spec, as a user runs it: GPU Deployments running on both groups, a
PodDisruptionBudget on group a's, their manifests unchanged throughout; group b's pods and advertised GPUs never
touched. The real kube-scheduler decides, per node, between the device plugin's nvidia.com/gpu and the DRA class
that names it (KEP-5004); the Eviction API enforces the budget."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.test_apply import REAPPLY
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
NAME = "dramove"
NAMESPACE = "default"
GROUP = "gpuctl.dev/nodegroup"
L_DRA = "gpuctl.dev/dra"  # the DRA kubelet plugin selects it
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
REPLICAS = {"a": 2, "b": 1}
MAX_UNAVAILABLE = 1
TEAM = "team-r"
QUOTA = "gpuctl-gpu-quota"
SPEC_TEAM = "team-s"  # in the spec: its quota and claim templates follow the move, as plan says beforehand


def spec(path: Path, a_dra: bool, with_a: bool = True) -> Path:
    group_a: dict[str, Any] = {"name": "a", "gpu": "t4", "nodes": 2, "gpusPerNode": 2, **({"dra": True} if a_dra else {})}
    groups = [group_a] if with_a else []
    doc = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": NAME},
           "spec": {"provider": {"cloud": "sim"},
                    "nodeGroups": [*groups, {"name": "b", "gpu": "t4", "nodes": 1, "gpusPerNode": 2}],
                    "tenants": [{"name": SPEC_TEAM, "gpus": 1}]}}
    path.write_text(yaml.safe_dump(doc))
    return path


def deployment(group: str) -> dict[str, Any]:
    labels = {"app": f"work-{group}"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"work-{group}"},
            "spec": {"replicas": REPLICAS[group], "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {GROUP: group}, "tolerations": TOLERATE,
                                           "containers": [{"name": "main", "image": "busybox:1.37",
                                                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


class Cluster:
    def __init__(self, env: dict[str, str], root: Path) -> None:
        from kubernetes import client, config

        self.env, self.root = env, root
        api = config.new_client_from_config(env["KUBECONFIG"])
        self.core, self.apps, self.policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def pods(self, group: str) -> list[dict[str, Any]]:
        answer = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"app=work-{group}", _preload_content=False)
        return json.loads(answer.data)["items"]

    def running(self, group: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(group) if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]

    def nodes(self, group: str) -> list[dict[str, Any]]:
        return json.loads(self.core.list_node(label_selector=f"{GROUP}={group}", _preload_content=False).data)["items"]

    def templates(self) -> dict[str, Any]:
        return {g: self.apps.read_namespaced_deployment(f"work-{g}", NAMESPACE).to_dict()["spec"]["template"]
                for g in REPLICAS}

    def team_templates(self, team: str = TEAM) -> list[str]:
        found = self.resource.list_namespaced_resource_claim_template(team, _preload_content=False)
        return [t["metadata"]["name"] for t in json.loads(found.data)["items"]]

    def settled(self) -> bool:
        return all(len(self.running(g)) == n == len(self.pods(g)) for g, n in REPLICAS.items())


def await_true(what: str, check: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp(NAME)
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    proc = run_gpuctl("apply", "-f", str(spec(root / "device-plugin.yaml", a_dra=False)), env=env)
    assert proc.returncode == 0, proc.stderr
    made = Cluster(env, root)
    try:
        for group in REPLICAS:
            made.apps.create_namespaced_deployment(NAMESPACE, deployment(group))
        made.policy.create_namespaced_pod_disruption_budget(NAMESPACE, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "work-a"},
            "spec": {"maxUnavailable": MAX_UNAVAILABLE, "selector": {"matchLabels": {"app": "work-a"}}}})
        await_true("the GPU Deployments running", made.settled)
        yield made
    finally:
        assert run_gpuctl("cluster", "delete", "--name", NAME, "--yes", env=env).returncode == 0


class Watch:
    """Polls, while an apply runs, what must hold throughout: group b's pods (their uids) and GPUs advertised by
    its device plugin, and group a's running pods never below what its PodDisruptionBudget allows."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.stop = cluster, threading.Event()
        self.b_uids: set[frozenset[str]] = set()
        self.b_gpus: set[tuple[str, ...]] = set()
        self.a_running: list[int] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.b_uids.add(frozenset(p["metadata"]["uid"] for p in self.cluster.pods("b")))
            self.b_gpus.add(tuple(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "none")
                                  for n in self.cluster.nodes("b")))
            self.a_running.append(len(self.cluster.running("a")))
            time.sleep(0.2)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def plan(cluster: Cluster, path: Path) -> dict[str, dict[str, str]]:
    proc = run_gpuctl("-o", "json", "plan", "-f", str(path), env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    return {s["step"]: s for s in json.loads(proc.stdout)}


def extended_claim(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any] | None:
    name = (pod["status"].get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if not name:
        return None
    return json.loads(cluster.resource.read_namespaced_resource_claim(name, NAMESPACE, _preload_content=False).data)


def move(cluster: Cluster, path: Path) -> tuple[subprocess.CompletedProcess[str], Watch, dict[str, Any]]:
    """Apply `path` while Watch looks on; plan beforehand predicted what each step that changes something did."""
    planned = {name: step["action"] for name, step in plan(cluster, path).items() if step["action"] != "check"}
    before = cluster.templates()
    b_uids = {p["metadata"]["uid"] for p in cluster.pods("b")}
    with Watch(cluster) as watch:
        proc = run_gpuctl("-o", "json", "apply", "-f", str(path), env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert cluster.templates() == before  # no pod manifest changed
    assert watch.b_uids == {frozenset(b_uids)}, "group b's pods were replaced"
    assert watch.b_gpus == {("2",)}, f"group b's node stopped advertising its GPUs: {watch.b_gpus}"
    assert min(watch.a_running) >= REPLICAS["a"] - MAX_UNAVAILABLE, watch.a_running
    result = json.loads(proc.stdout)
    assert {s["step"]: s["outcome"] for s in result["steps"] if s["step"] in planned} == planned
    return proc, watch, result


def test_plan_names_the_move_and_what_restarts(cluster: Cluster) -> None:
    steps = plan(cluster, spec(cluster.root / "a-dra.yaml", a_dra=True))
    names = list(steps)
    assert names.index("install-dra-driver") < names.index("move-to-dra/a") < names.index(
        "move-to-device-plugin/b") < names.index("wait-capacity/a")
    moving = steps["move-to-dra/a"]
    assert moving["action"] == "updated", moving
    assert moving["detail"].startswith("moves group a to DRA: device plugin stops on its 2 nodes, GPU pods drained "
                                       "respecting PDBs (2 now), DRA kubelet plugin starts"), moving
    assert steps["move-to-device-plugin/b"]["action"] == "no change"


def test_apply_moves_group_a_to_dra_and_b_keeps_serving(cluster: Cluster) -> None:
    proc, watch, result = move(cluster, spec(cluster.root / "a-dra.yaml", a_dra=True))
    outcomes = {s["step"]: s["outcome"] for s in result["steps"]}
    assert outcomes["move-to-dra/a"] == "updated" and outcomes["move-to-device-plugin/b"] == "no change"
    assert outcomes["validate/a"] == outcomes["validate/b"] == "passed"
    assert "evicting GPU pod default/work-a-" in proc.stderr
    await_true("group a's pods running again", cluster.settled)
    a_node_objects, running_a, running_b = cluster.nodes("a"), cluster.running("a"), cluster.running("b")
    a_nodes = {n["metadata"]["name"] for n in a_node_objects}
    assert (len(a_nodes), len(running_a), len(running_b)) == (2, REPLICAS["a"], REPLICAS["b"])
    for pod in running_a:  # served by DRA: a claim the scheduler made, allocated from a's slices
        assert pod["spec"]["nodeName"] in a_nodes
        claim = extended_claim(cluster, pod)
        assert claim is not None, pod["metadata"]["name"]
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"]) for r in results] == [("gpu.nvidia.com", pod["spec"]["nodeName"])]
    for node in a_node_objects:  # the device plugin advertises nothing there any more
        assert node["status"]["allocatable"].get("nvidia.com/gpu", "0") == "0"
    assert all(extended_claim(cluster, p) is None for p in running_b)
    assert outcomes[f"ensure-tenant/{SPEC_TEAM}"] == "updated"  # DRA serves a group: the team's claims too
    assert cluster.team_templates(SPEC_TEAM) == ["gpu-t4"]
    quota = cluster.core.read_namespaced_resource_quota(QUOTA, SPEC_TEAM).to_dict()["spec"]["hard"]
    assert quota["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "1", quota


def test_status_and_top_show_each_node_its_own_agent(cluster: Cluster) -> None:
    """Group a on DRA, b on the device plugin, the driver's DeviceClass present: status -o json gives b's node its
    allocatable GPUs (not 'devices 0, kubelet plugin missing') and a's nodes their devices; the summary counts
    both; top finds each group's pods on its own node's GPUs (b's from the series, a's from the claims)."""
    proc = run_gpuctl("-o", "json", "status", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    nodes = {n["node"]: n for n in found["nodes"]}
    a_nodes = sorted(n["metadata"]["name"] for n in cluster.nodes("a"))
    assert len(a_nodes) == 2, a_nodes
    [b_node] = [n["metadata"]["name"] for n in cluster.nodes("b")]
    b = nodes[b_node]
    assert (b["servedBy"], b["allocatable"], b["devicePlugin"]) == ("device-plugin", {"nvidia.com/gpu": 2}, "ready"), b
    assert not {"devices", "kubeletPlugin", "free"} & set(b), b
    held = {p["spec"]["nodeName"] for p in cluster.running("a")}
    for name in a_nodes:
        a = nodes[name]
        assert (a["servedBy"], a["devices"], a["kubeletPlugin"], a["allocatable"]) == ("dra", 2, "ready", {}), a
        assert a["allocated"] == sum(p["spec"]["nodeName"] == name for p in cluster.running("a")), a
    assert held <= set(a_nodes)
    assert found["summary"] == {"devicePlugin": {"nodes": 1, "gpus": 2, "allocatable": {"nvidia.com/gpu": 2}},
                                "dra": {"nodes": 2, "gpus": 4, "devices": 4, "allocated": REPLICAS["a"],
                                        "free": 4 - REPLICAS["a"]}}, found["summary"]
    table = run_gpuctl("status", env=cluster.env)
    assert table.returncode == 0 and "SERVED_BY" in table.stdout and "served: 1 node by the device plugin" in \
        table.stdout, table.stdout
    assert max(map(len, table.stdout.splitlines())) <= 80, table.stdout
    pods = {g: {f"{NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"] for p in cluster.running(g)}
            for g in REPLICAS}
    deadline = time.monotonic() + 90
    while True:
        proc = run_gpuctl("-o", "json", "top", env=cluster.env)
        assert proc.returncode == 0, proc.stderr
        gpus = json.loads(proc.stdout)["gpus"]
        on = {p: g["node"] for g in gpus for p in g["pods"]}
        if all(on.get(p) == node for group in pods.values() for p, node in group.items()) \
                or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {g["node"] for g in gpus} >= {b_node, *a_nodes}, gpus
    for group in pods.values():
        assert {p: on.get(p) for p in group} == group, gpus


def test_validate_checks_each_group_the_way_it_is_served(cluster: Cluster) -> None:
    """validate with no --nodegroup on the mixed cluster: group a through the driver's slices and a claim's smoke
    test, group b through allocatable and the device plugin, each check named after its group."""
    proc = run_gpuctl("-o", "json", "validate", env=cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert {name.rsplit("/", 1)[-1] for name in checks} == {"a", "b"}, checks
    assert "device-plugin/b" in checks and "capacity/b" in checks, checks
    assert "device-plugin/a" not in checks and "dra-driver/a" in checks, checks
    assert "allocated by the scheduler" in checks["smoke-test/a"]["detail"], checks  # through a claim
    assert "allocated by the scheduler" not in checks["smoke-test/b"]["detail"], checks


def test_reapply_with_no_change_writes_nothing(cluster: Cluster) -> None:
    path = spec(cluster.root / "a-dra.yaml", a_dra=True)
    proc = subprocess.run([sys.executable, "-c", REAPPLY, str(path)], capture_output=True, text=True,
                          env=cluster.env, timeout=300)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "writes": []}, proc.stderr
    assert {s["outcome"] for s in json.loads(proc.stdout)["steps"]} == {"no change"}, proc.stdout


def test_a_spec_without_group_a_leaves_it_on_dra(cluster: Cluster) -> None:
    """A group the file does not name stays as it is (as its sharing and taints do): DRA keeps serving it."""
    steps = plan(cluster, spec(cluster.root / "b-only.yaml", a_dra=False, with_a=False))
    assert "remove-dra-driver" not in steps and "install-dra-driver" in steps
    changes = {name: s["action"] for name, s in steps.items() if s["action"] not in ("no change", "check")}
    assert not changes, changes


def test_the_old_spec_moves_group_a_back(cluster: Cluster) -> None:
    """...and takes away what the move added: the team's claim templates (a team added while group a was on DRA
    got them), then the driver's release, after the moves; the cluster is out of DRA mode."""
    proc = run_gpuctl("tenant", "add", TEAM, "--gpus", "1", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert cluster.team_templates(), "a team added in DRA mode gets claim templates"
    path = spec(cluster.root / "device-plugin.yaml", a_dra=False)
    steps = plan(cluster, path)
    assert steps["move-to-device-plugin/a"]["detail"].startswith(
        "moves group a back to the device plugin: DRA kubelet plugin stops on its 2 nodes")
    names = list(steps)
    assert names.index("move-to-device-plugin/b") < names.index("remove-dra-driver") < names.index("wait-capacity/a")
    assert steps["remove-dra-driver"]["action"] == "deleted", steps["remove-dra-driver"]
    assert "helm uninstall dra-driver-nvidia-gpu" in steps["remove-dra-driver"]["detail"]
    _, _, result = move(cluster, path)
    outcomes = {s["step"]: s["outcome"] for s in result["steps"]}
    assert outcomes["move-to-device-plugin/a"] == "updated" and outcomes["validate/a"] == "passed"
    assert outcomes["remove-dra-driver"] == "deleted"
    classes = json.loads(cluster.resource.list_device_class(_preload_content=False).data)["items"]
    assert not classes, [c["metadata"]["name"] for c in classes]
    assert not cluster.team_templates() and not cluster.team_templates(SPEC_TEAM)
    assert outcomes[f"ensure-tenant/{TEAM}"] == "updated"  # not in the spec, and yet out of DRA mode with it
    for team in (TEAM, SPEC_TEAM):
        quota = cluster.core.read_namespaced_resource_quota(QUOTA, team).to_dict()["spec"]["hard"]
        assert quota["requests.nvidia.com/gpu"] == "1" and not [k for k in quota if "deviceclass" in k], quota
    listed = subprocess.run([str(find_tool("helm")), "list", "-q", "-n", "dra-driver-nvidia-gpu"], env=cluster.env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and not listed.stdout.strip(), listed.stdout + listed.stderr
    await_true("group a's pods running again", cluster.settled)
    running_a = cluster.running("a")
    assert len(running_a) == REPLICAS["a"] and all(extended_claim(cluster, p) is None for p in running_a)
    assert {n["status"]["allocatable"].get("nvidia.com/gpu") for n in cluster.nodes("a")} == {"2"}
    slices = json.loads(cluster.resource.list_resource_slice(_preload_content=False).data)["items"]
    assert not [s for s in slices if s["spec"].get("nodeName", "").startswith("a-")]
    assert {s["action"] for s in plan(cluster, path).values()} == {"no change"}


def test_a_dra_groups_new_nodes_come_up_on_dra(cluster: Cluster) -> None:
    path = spec(cluster.root / "a-dra.yaml", a_dra=True)
    _, _, result = move(cluster, path)  # forward again, after the rollback
    assert {s["step"]: s["outcome"] for s in result["steps"]}[f"ensure-tenant/{TEAM}"] == "updated"
    assert cluster.team_templates() == ["gpu-t4"]  # the team of `tenant add` claims by template again
    proc = run_gpuctl("nodegroup", "scale", "--cluster", NAME, "--name", "a", "--nodes", "3", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    new = {n["metadata"]["name"]: n for n in cluster.nodes("a")}["a-2"]
    assert new["metadata"]["labels"].get("gpuctl.dev/dra") == "true"
    assert new["status"]["allocatable"].get("nvidia.com/gpu", "0") == "0"
    slices = json.loads(cluster.resource.list_resource_slice(_preload_content=False).data)["items"]
    assert [len(s["spec"]["devices"]) for s in slices if s["spec"].get("nodeName") == "a-2"] == [2]


def test_a_deleted_dra_groups_name_comes_back_on_the_device_plugin(cluster: Cluster) -> None:
    """Deleting the group takes its DRA mark off the cluster's record: a new group of the same name, added without
    one, is served by the device plugin, not moved to DRA."""
    proc = run_gpuctl("nodegroup", "delete", "--cluster", NAME, "--name", "a", "--yes", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    stack = json.loads(cluster.core.read_namespaced_config_map("gpuctl-stack", "gpu-operator").data["stack.json"])
    assert stack["dra_groups"] == [], stack
    proc = run_gpuctl("nodegroup", "add", "--cluster", NAME, "--name", "a", "--gpu", "t4", "--nodes", "1",
                      "--gpus-per-node", "2", env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    [node] = cluster.nodes("a")
    assert L_DRA not in node["metadata"]["labels"], node["metadata"]["labels"]
    assert node["status"]["allocatable"].get("nvidia.com/gpu") == "2"
