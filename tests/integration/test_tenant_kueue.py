"""The tenants' queues end to end on the sim, decided by Kueue's real controller: `cluster create --kueue`
runs Kueue (CRDs generated from its API types, its v0.19.2 manager), `tenant add` writes the teams'
flavors and queues, and a Job over a team's nominal quota is admitted only by borrowing its cohort's idle
quota. Nothing in gpuctl admits anything (tests/integration/test_kueue_controller.py covers the manager
itself)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration
CLUSTER = "kq"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
WAIT_S = 90.0
HOLD = {"sim.gpuctl.dev/no-such-node": "true"}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = dict(sim_env, KUBECONFIG=str(tmp_path_factory.mktemp("kq") / "kubeconfig"))
    proc = run_gpuctl("-o", "json", "cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", "a100-40gb",
                      "--nodes", "1", "--kueue", "--no-validate", env=env)
    assert proc.returncode == 0, proc.stderr
    steps = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert steps["install-kueue"] == "created"
    for team, flags in (("team-a", ("--borrow", "2")), ("team-b", ())):
        proc = run_gpuctl("tenant", "add", team, "--gpus", "4", "--cohort", "pool", *flags, env=env)
        assert proc.returncode == 0, proc.stderr
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def clients(env: dict[str, str]) -> tuple[Any, Any]:
    from kubernetes import client, config

    api = config.new_client_from_config(env["KUBECONFIG"])
    return client.BatchV1Api(api), client.CustomObjectsApi(api)


def submit(env: dict[str, str], team: str, name: str, gpus: int) -> None:
    """A Job in the team's queue, suspended as Kueue's webhook would make it; it also asks for CPU, which
    gpuctl's queues leave to the scheduler (quotaCheckStrategy IgnoreUndeclared)."""
    batch, _ = clients(env)
    batch.create_namespaced_job(team, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": team}},
        # kwok completes a Job's pods as soon as they run (its pod-complete Stage); a pod that stays
        # unscheduled keeps its Job, and so its admitted quota, as a long training run would.
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "nodeSelector": HOLD, "containers": [{
            "name": "train", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04", "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}})


def admitted(env: dict[str, str], team: str, job: str) -> bool:
    _, custom = clients(env)
    for wl in custom.list_namespaced_custom_object(GROUP, VERSION, team, "workloads")["items"]:
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
            return any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in (wl.get("status") or {}).get("conditions") or [])
    return False


def wait(what: str, probe: Any) -> Any:
    from gpuctl.simulator.kwok import KwokCluster

    deadline = time.monotonic() + WAIT_S
    while not (value := probe()):
        if time.monotonic() > deadline:
            log = KwokCluster(CLUSTER).dir / "logs" / "kueue.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else "(no log)"
            pytest.fail(f"{what}: not within {WAIT_S:.0f}s; Kueue's log ends:\n{tail}")
        time.sleep(0.5)
    return value


def test_a_team_over_its_quota_is_admitted_by_borrowing_idle_quota(cluster: dict[str, str]) -> None:
    submit(cluster, "team-a", "train", 6)  # team-a's 4 + 2 borrowed from idle team-b
    wait("train admitted", lambda: admitted(cluster, "team-a", "train"))
    batch, _ = clients(cluster)
    wait("train unsuspended", lambda: not batch.read_namespaced_job("train", "team-a").spec.suspend)

    seen: list[Any] = []

    def row() -> dict[str, Any] | None:
        rows = {r["tenant"]: r for r in json.loads(run_gpuctl("-o", "json", "tenant", "list", env=cluster).stdout)}
        seen[:] = [rows["team-a"]]
        [(flavor, usage)] = rows["team-a"]["queue"].items()
        return usage["nvidia.com/gpu"] if usage["nvidia.com/gpu"]["used"] == 6 else None

    deadline = time.monotonic() + WAIT_S
    while (got := row()) is None:
        assert time.monotonic() < deadline, f"team-a's use never reached 6 in tenant list: {seen}"
        time.sleep(0.5)
    assert got == {"nominal": 4, "borrowed": 2, "used": 6}

    submit(cluster, "team-b", "eval", 4)  # 2 of team-b's 4 are lent, and not reclaimed
    submit(cluster, "team-b", "small", 2)
    wait("small admitted", lambda: admitted(cluster, "team-b", "small"))
    time.sleep(3)  # Kueue has decided on eval by now
    assert not admitted(cluster, "team-b", "eval")
    assert batch.read_namespaced_job("eval", "team-b").spec.suspend is True


def test_a_job_beyond_quota_and_borrowing_is_never_admitted(cluster: dict[str, str]) -> None:
    submit(cluster, "team-a", "too-big", 7)  # 4 + 2 at most, however idle the cohort
    time.sleep(5)
    assert not admitted(cluster, "team-a", "too-big")


def test_rerun_keeps_kueue_and_remove_deletes_the_queues(cluster: dict[str, str]) -> None:
    proc = run_gpuctl("-o", "json", "cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", "a100-40gb",
                      "--nodes", "1", "--kueue", "--no-validate", env=cluster)
    assert proc.returncode == 0, proc.stderr
    assert {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}["install-kueue"] == "no change"
    proc = run_gpuctl("tenant", "remove", "team-b", "--yes", env=cluster)
    assert proc.returncode == 0, proc.stderr
    _, custom = clients(cluster)
    queues = {q["metadata"]["name"]: q for q in custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")["items"]}
    # Kueue keeps a ClusterQueue with admitted workloads until they are gone (its resource-in-use finalizer)
    assert "team-b" not in queues or queues["team-b"]["metadata"].get("deletionTimestamp"), queues.get("team-b")
