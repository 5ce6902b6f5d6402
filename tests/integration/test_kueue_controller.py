"""Kueue's real controller manager (v0.19.2, built from its source by gpuctl's installer) on a sim cluster.

Nothing here imitates Kueue: its own manager decides admission against ClusterQueue quota. The cluster
gets the CRDs controller-gen generated from Kueue's API types (first held against upstream's committed
ones in ../shared/upstream), a ResourceFlavor for the sim's A100 nodes, and two ClusterQueues of 4 GPUs
in one cohort; Jobs are created suspended with the queue-name label (as Kueue's Job webhook, registered by
start_kueue, would also make them). Expected outcomes follow Kueue's documented semantics (apis/kueue/v1beta2/clusterqueue_types.go):
- a ClusterQueue may use its nominal quota plus what it may borrow (`borrowingLimit`; unused quota of
  the cohort);
- borrowed quota is not taken back while `preemption.reclaimWithinCohort` is `Never` (the default), so
  the lender can then use only what is left;
- a request above nominal + borrowingLimit never fits ("> maximum capacity"), even in an idle cohort.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.support.model import get_gpu
from tests.support.sim import KwokCluster, daemon, get_kueue_pid, kueue_crds_dir, start_kueue, stop_kueue
from tests.support.tools import ensure_tools, patch_kueue_main
from tests.support.util import ToolError

pytestmark = pytest.mark.integration

CLUSTER = "kueue"
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream" / "kueue-v0.19.2"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
A100 = get_gpu("a100-40gb")
# Every kind Kueue's manager watches: a missing one keeps its caches from syncing.
KINDS = ("admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
         "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads")
WAIT_S = 90.0
T = TypeVar("T")


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def served(crd: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    return [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]]


def test_generated_crds_are_upstreams() -> None:
    """controller-gen v0.20.1 over Kueue's API types gives every CRD, and exactly the files upstream
    commits (config/components/crd/bases; the six in ../shared/upstream) for those it has."""
    generated = {p.name: load(p) for p in sorted(kueue_crds_dir().glob("*.yaml"))}
    assert sorted(generated) == [f"kueue.x-k8s.io_{kind}.yaml" for kind in KINDS]
    upstream = sorted(UPSTREAM.glob("*.yaml"))
    assert len(upstream) == 6
    for path in upstream:
        theirs, ours = load(path), generated[path.name]
        assert ours["metadata"]["name"] == theirs["metadata"]["name"]
        assert served(ours) == served(theirs), path.name
        assert served(ours) == [("v1beta1", True, False), ("v1beta2", True, True)], path.name
        assert ours == theirs, f"{path.name}: generated CRD differs from upstream's"


def test_build_patch_fails_loudly_when_upstream_moved() -> None:
    """The build's edits of cmd/kueue/main.go match one line each, or the build stops naming it."""
    with pytest.raises(ToolError, match=r"has 0 lines 'flag.Parse\(\)'"):
        patch_kueue_main("package main\n\nfunc main() {}\n")
    with pytest.raises(ToolError, match="expects exactly one"):
        patch_kueue_main("\tflag.Parse()\n\tflag.Parse()\n")


@dataclass
class Kueue:
    api: Any  # kubernetes.client.ApiClient
    pid: int
    startup_s: float

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    @property
    def batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.api)

    def create(self, plural: str, body: dict[str, Any], namespace: str | None = None) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        if namespace is None:
            self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        else:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)

    def workload(self, namespace: str, job: str) -> dict[str, Any] | None:
        """The Workload Kueue made for a Job (owned by it)."""
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]
        owned = [w for w in items if any(o["kind"] == "Job" and o["name"] == job
                                         for o in w["metadata"].get("ownerReferences", []))]
        assert len(owned) <= 1, owned
        return owned[0] if owned else None

    def submit(self, namespace: str, name: str, gpus: int) -> None:
        """A suspended Job in the namespace's LocalQueue `gpus`, one pod asking for `gpus` GPUs."""
        resources = {GPU: str(gpus)}
        self.batch.create_namespaced_job(namespace, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "train", "image": "busybox", "command": ["sleep", "3600"],
                                "resources": {"requests": resources, "limits": resources}}]}}}})


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def log_tail(lines: int = 15) -> str:
    path = KwokCluster(CLUSTER).dir / "logs" / "kueue.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f}s; Kueue's log ends:\n{log_tail()}")
        time.sleep(0.5)
    return value


def reserving(kueue: Kueue, name: str, total: str, borrowed: str) -> dict[str, Any] | None:
    """The ClusterQueue once its status.flavorsReservation shows (total, borrowed) GPUs of flavor a100."""
    cq = kueue.get("clusterqueues", name)
    return cq if usage(cq, "flavorsReservation") == {f"a100/{GPU}": (total, borrowed)} else None


def usage(cq: dict[str, Any], field: str) -> dict[str, tuple[str, str]]:
    """{flavor/resource: (total, borrowed)} from a ClusterQueue's status.flavorsReservation or flavorsUsage."""
    return {f"{f['name']}/{r['name']}": (str(r.get("total", "0")), str(r.get("borrowed", "0")))
            for f in (cq.get("status") or {}).get(field) or [] for r in f["resources"]}


@pytest.fixture(scope="module")
def kueue(sim_env: dict[str, str]) -> Iterator[Kueue]:
    """A sim cluster of its own (one node of 8 A100s) with Kueue's CRDs and its manager running."""
    from kubernetes import config

    from tests.support.model import NodeGroupSpec
    from tests.support.sim import SimProvider

    crds = kueue_crds_dir()  # builds the tool first when absent (minutes)
    provider = SimProvider()
    try:
        provider.ensure_cluster(CLUSTER)
        provider.ensure_node_group(CLUSTER, NodeGroupSpec("gpu", A100, 1, 8))
        kubeconfig = KwokCluster(CLUSTER).kubeconfig_path
        [kubectl] = ensure_tools(["kubectl"])
        files = sorted(crds.glob("*.yaml"))
        apply = subprocess.run([str(kubectl.path), "--kubeconfig", str(kubeconfig), "apply", "--server-side",
                                "--field-manager", "gpuctl", *(a for f in files for a in ("-f", str(f)))],
                               capture_output=True, text=True, timeout=120)
        assert apply.returncode == 0, apply.stderr
        established = subprocess.run([str(kubectl.path), "--kubeconfig", str(kubeconfig), "wait",
                                      "--for=condition=Established", "--timeout=60s",
                                      *(f"crd/{kind}.{GROUP}" for kind in KINDS)],
                                     capture_output=True, text=True, timeout=120)
        assert established.returncode == 0, established.stderr
        started = time.monotonic()
        pid = start_kueue(CLUSTER)
        startup_s = time.monotonic() - started
        print(f"\nKueue's manager (pid {pid}) ready in {startup_s:.1f}s")
        yield Kueue(config.new_client_from_config(str(kubeconfig)), pid, startup_s)
    finally:
        try:  # deleting the cluster stops its manager (KwokCluster.remove)
            proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=sim_env)
            assert proc.returncode == 0, proc.stderr
            assert not daemon(CLUSTER).procs(), "Kueue's manager still runs after its cluster was deleted"
        finally:
            stop_kueue(CLUSTER)


def test_start_is_idempotent(kueue: Kueue) -> None:
    assert start_kueue(CLUSTER) == kueue.pid
    assert get_kueue_pid(CLUSTER) == kueue.pid
    assert len(daemon(CLUSTER).procs()) == 1


def test_jobs_are_admitted_against_cluster_queue_quota_and_borrow_from_the_cohort(kueue: Kueue) -> None:
    from kubernetes import client

    v1 = client.CoreV1Api(kueue.api)
    [node] = v1.list_node(label_selector="gpuctl.dev/nodegroup=gpu").items
    assert node.metadata.labels["nvidia.com/gpu.product"] == A100.product
    kueue.create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "a100"},
                                     "spec": {"nodeLabels": {"nvidia.com/gpu.product": A100.product}}})
    for team, limits in (("team-a", {"borrowingLimit": "2"}), ("team-b", {})):
        kueue.create("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": team}, "spec": {
            "cohortName": "gpu-pool", "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": "a100", "resources": [{"name": GPU, "nominalQuota": "4", **limits}]}]}]}})
        v1.create_namespace({"metadata": {"name": team}})
        kueue.create("localqueues", {"kind": "LocalQueue", "metadata": {"name": "gpus"},
                                     "spec": {"clusterQueue": team}}, namespace=team)
    for team in ("team-a", "team-b"):
        def active(team: str = team) -> bool | None:
            return (condition(kueue.get("clusterqueues", team), "Active") or {}).get("status") == "True" or None

        wait_for(f"ClusterQueue {team} active", active)
    started = time.monotonic()

    def job_state(namespace: str, name: str) -> tuple[bool, dict[str, str]]:
        job = kueue.batch.read_namespaced_job(name, namespace)
        return bool(job.spec.suspend), job.spec.template.spec.node_selector or {}

    def admitted(namespace: str, job: str) -> dict[str, Any] | None:
        wl = kueue.workload(namespace, job)
        return wl if (condition(wl, "Admitted") or {}).get("status") == "True" else None

    def refused(namespace: str, job: str) -> dict[str, Any] | None:
        """Kueue has tried the Workload and found no quota: QuotaReserved False, with its reason."""
        wl = kueue.workload(namespace, job)
        reserved = condition(wl, "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" and reserved["message"] else None

    # Over nominal + borrowingLimit (4 + 2) while the whole cohort (8) is idle: never admitted.
    kueue.submit("team-a", "too-big", 7)
    reason = wait_for("too-big evaluated", lambda: refused("team-a", "too-big"))
    # "Pending" (pkg/scheduler/scheduler.go L1172): the granular reasons need the UnadmittedWorkloadsObservability gate.
    assert reason["reason"] == "Pending", reason
    assert "current podset request (7) > maximum capacity (6)" in reason["message"], reason

    # 6 GPUs: team-a's 4, plus 2 borrowed from idle team-b.
    kueue.submit("team-a", "train", 6)
    wl = wait_for("train admitted", lambda: admitted("team-a", "train"))
    first_admission_s = time.monotonic() - started
    assert wl["status"]["admission"]["clusterQueue"] == "team-a"
    [podset] = wl["status"]["admission"]["podSetAssignments"]
    assert podset["flavors"] == {GPU: "a100"} and podset["resourceUsage"] == {GPU: "6"}
    # Kueue starts the Job on the flavor's nodes.
    state = wait_for("train unsuspended", lambda: None if (s := job_state("team-a", "train"))[0] else s)
    assert state == (False, {"nvidia.com/gpu.product": A100.product})
    cq = wait_for("team-a's reservation", lambda: reserving(kueue, "team-a", "6", "2"))
    assert usage(cq, "flavorsUsage") == {f"a100/{GPU}": ("6", "2")}
    assert (cq["status"]["admittedWorkloads"], cq["status"]["pendingWorkloads"]) == (1, 1)

    # team-b's 4 are nominally its own, but 2 are lent and not reclaimed (reclaimWithinCohort: Never).
    kueue.submit("team-b", "eval", 4)
    reason = wait_for("eval evaluated", lambda: refused("team-b", "eval"))
    assert reason["reason"] == "Pending", reason
    assert "insufficient unused quota for nvidia.com/gpu in flavor a100, 2 more needed" in reason["message"], reason
    # What is left of the cohort (2) is team-b's to use, without borrowing.
    kueue.submit("team-b", "small", 2)
    wait_for("small admitted", lambda: admitted("team-b", "small"))
    cq_b = wait_for("team-b's reservation", lambda: reserving(kueue, "team-b", "2", "0"))
    assert (cq_b["status"]["admittedWorkloads"], cq_b["status"]["pendingWorkloads"]) == (1, 1)

    # Kueue's decisions since small was admitted (team-b's ClusterQueue counts eval pending, above): eval and
    # too-big are still refused, and team-a's reservation is still the 6 of train.
    for namespace, job in (("team-a", "too-big"), ("team-b", "eval")):
        assert admitted(namespace, job) is None and refused(namespace, job) is not None, job
    cq_a = kueue.get("clusterqueues", "team-a")
    assert usage(cq_a, "flavorsReservation") == {f"a100/{GPU}": ("6", "2")}
    assert (cq_a["status"]["admittedWorkloads"], cq_a["status"]["pendingWorkloads"]) == (1, 1)
    print(f"\nfirst admission {first_admission_s:.1f}s after the queues were active; "
          f"whole scenario {time.monotonic() - started:.1f}s")


def test_stop_and_restart_keep_admissions(kueue: Kueue) -> None:
    """Admission lives in the API server: a new manager takes up the queues where the old one was."""
    stop_kueue(CLUSTER)
    assert get_kueue_pid(CLUSTER) is None and not daemon(CLUSTER).procs()
    kueue.pid = start_kueue(CLUSTER)
    cq = wait_for("team-a's reservation after a restart", lambda: reserving(kueue, "team-a", "6", "2"))
    assert cq["status"]["admittedWorkloads"] == 1
