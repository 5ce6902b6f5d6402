"""The tenants' queues end to end on the sim, decided by Kueue's real controller: `cluster create --kueue`
runs Kueue (CRDs generated from its API types, its v0.19.2 manager), `tenant add` writes the teams'
flavors and queues, and a Job over a team's nominal quota is admitted only by borrowing its cohort's idle
quota. Nothing in gpuctl admits anything (tests/integration/test_kueue_controller.py covers the manager
itself). Kueue's own webhooks are in force (gpuctl/simulator/kueue_webhooks.py): a Job written as for plain
Kubernetes, without a queue label, goes to the team's LocalQueue `default`, suspended until Kueue admits it."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
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
    for team, flags in (("team-a", ("--gpus", "4", "--cohort", "pool", "--borrow", "2")),
                        ("team-b", ("--gpus", "4", "--cohort", "pool")),
                        ("team-c", ("--gpus", "2"))):  # a cohort of its own: the first tests fill "pool"
        proc = run_gpuctl("tenant", "add", team, *flags, env=env)
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


def refused(env: dict[str, str], team: str, job: str) -> dict[str, Any] | None:
    """Kueue's own refusal of the Job's Workload: its QuotaReserved condition False, with Kueue's message (as
    tests/integration/test_kueue_controller.py reads it); None until Kueue has tried it."""
    _, custom = clients(env)
    for wl in custom.list_namespaced_custom_object(GROUP, VERSION, team, "workloads")["items"]:
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
            reserved = next((c for c in (wl.get("status") or {}).get("conditions") or []
                             if c["type"] == "QuotaReserved"), None)
            return reserved if reserved and reserved["status"] == "False" and reserved.get("message") else None
    return None


def wait(what: str, probe: Any) -> Any:
    from tests.support.sim import KwokCluster

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
    reason = wait("Kueue's refusal of eval", lambda: refused(cluster, "team-b", "eval"))
    assert "insufficient unused quota for nvidia.com/gpu in flavor" in reason["message"], reason
    assert not admitted(cluster, "team-b", "eval")


def test_a_job_beyond_quota_and_borrowing_is_never_admitted(cluster: dict[str, str]) -> None:
    submit(cluster, "team-a", "too-big", 7)  # 4 + 2 at most, however idle the cohort
    reason = wait("Kueue's refusal of too-big", lambda: refused(cluster, "team-a", "too-big"))
    assert reason["reason"] == "Pending", reason
    assert "current podset request (7) > maximum capacity (6)" in reason["message"], reason
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


TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def user_job(name: str, gpus: int = 0) -> dict[str, Any]:
    """A Job as written for plain Kubernetes: no queue label, not suspended."""
    limits = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "tolerations": TOLERATE_GPU, "containers": [{
            "name": "main", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04", "command": ["nvidia-smi"],
            "resources": limits}]}}}}


def workload(env: dict[str, str], namespace: str, job: str) -> dict[str, Any] | None:
    _, custom = clients(env)
    return next((wl for wl in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]
                 if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", []))), None)


def gpuctl_client(env: dict[str, str]) -> Any:
    from tests.support.kube import Kube

    return Kube.connect(Path(env["KUBECONFIG"]))


def test_a_job_written_without_a_queue_is_queued_in_default_and_admitted(cluster: dict[str, str]) -> None:
    from tests.support.ops import wait_default_queue_in_force

    wait_default_queue_in_force(gpuctl_client(cluster), "team-c")  # (what `tenant add` waits for)
    batch, _ = clients(cluster)
    created = batch.create_namespaced_job("team-c", user_job("smoke", gpus=1))
    # Kueue's webhook put it in the namespace's `default` LocalQueue and created it suspended
    assert created.metadata.labels["kueue.x-k8s.io/queue-name"] == "default"
    assert created.spec.suspend is True
    wl = wait("smoke admitted", lambda: (w := workload(cluster, "team-c", "smoke")) and any(
        c["type"] == "Admitted" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or [])
        and w)
    assert wl["spec"]["queueName"] == "default" and wl["status"]["admission"]["clusterQueue"] == "team-c"
    [podset] = wl["status"]["admission"]["podSetAssignments"]
    assert podset["resourceUsage"] == {"nvidia.com/gpu": "1"}
    # Kueue starts it; its pod runs on the GPU node (kwok completes it at once)
    job = wait("smoke succeeded", lambda: (j := batch.read_namespaced_job("smoke", "team-c")).status.succeeded and j)
    assert job.spec.suspend is False
    assert job.spec.template.spec.node_selector["gpuctl.dev/gpu"] == "a100-40gb"  # the flavor's: Kueue's doing


def test_a_job_where_no_default_queue_exists_is_left_as_written(cluster: dict[str, str]) -> None:
    from kubernetes import client, config

    v1 = client.CoreV1Api(config.new_client_from_config(cluster["KUBECONFIG"]))
    v1.create_namespace({"metadata": {"name": "no-queue"}})
    try:
        batch, _ = clients(cluster)
        plain = batch.create_namespaced_job("no-queue", user_job("plain"))
        assert "kueue.x-k8s.io/queue-name" not in (plain.metadata.labels or {})
        assert plain.spec.suspend is False
        # Kueue's webhook is called here all the same: a Job naming a queue is created suspended
        queued = user_job("queued")
        queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "elsewhere"}
        assert batch.create_namespaced_job("no-queue", queued, dry_run="All").spec.suspend is True
    finally:
        v1.delete_namespace("no-queue")


def kueue_webhooks(env: dict[str, str]) -> dict[str, Any]:  # name -> the client's V1MutatingWebhook/V1ValidatingWebhook
    """Name -> entry of the webhooks in the two configurations gpuctl registers, read from the API server."""
    from kubernetes import client, config

    api = client.AdmissionregistrationV1Api(config.new_client_from_config(env["KUBECONFIG"]))
    docs = [api.read_mutating_webhook_configuration("kueue-mutating-webhook-configuration"),
            api.read_validating_webhook_configuration("kueue-validating-webhook-configuration")]
    for doc in docs:
        assert doc.metadata.labels == {"app.kubernetes.io/managed-by": "gpuctl"}
    return {h.name: h for doc in docs for h in doc.webhooks}


def serving(port: int, ca_bundle: bytes) -> str:
    """The subject of the certificate served on 127.0.0.1:`port`, verified against `ca_bundle` (TLS, as the
    API server calls it)."""
    context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
            context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        cert = tls.getpeercert()
        assert cert is not None  # verified: the handshake required one
        return str(cert["subject"])


def manager_port() -> int:
    import yaml

    from tests.support.sim import KwokCluster

    return int(yaml.safe_load((KwokCluster(CLUSTER).dir / "kueue" / "config.yaml").read_text())["webhook"]["port"])


def test_the_webhooks_call_the_manager_on_loopback_with_its_certificate(cluster: dict[str, str]) -> None:
    hooks = kueue_webhooks(cluster)
    assert {"mjob.kb.io", "vjob.kb.io", "mclusterqueue.kb.io", "vclusterqueue.kb.io", "vresourceflavor.kb.io",
            "mworkload.kb.io", "vworkload.kb.io"} <= set(hooks)
    assert not {"mpod.kb.io", "vpod.kb.io", "mrayjob.kb.io"} & set(hooks)  # integrations the sim does not enable
    port = manager_port()
    for name, hook in hooks.items():
        assert hook.client_config.service is None, name
        assert hook.client_config.url.startswith(f"https://127.0.0.1:{port}/"), (name, hook.client_config.url)
        assert (hook.failure_policy, hook.side_effects) == ("Fail", "None"), name
    assert hooks["mjob.kb.io"].client_config.url == f"https://127.0.0.1:{port}/mutate-batch-v1-job"
    assert hooks["mjob.kb.io"].namespace_selector.match_expressions[0].values == ["kube-system", "kueue-system"]
    assert "gpuctl-sim-kueue" in serving(port, hooks["mjob.kb.io"].client_config.ca_bundle)


def test_after_a_restart_the_webhooks_call_the_new_manager(cluster: dict[str, str]) -> None:
    from tests.support.sim import get_kueue_pid, start_kueue, stop_kueue

    before = kueue_webhooks(cluster)["mjob.kb.io"].client_config
    old = get_kueue_pid(CLUSTER)
    stop_kueue(CLUSTER)
    started = time.monotonic()
    assert start_kueue(CLUSTER) != old
    print(f"\nKueue's manager restarted, its webhooks in force, in {time.monotonic() - started:.1f}s")
    after = kueue_webhooks(cluster)["mjob.kb.io"].client_config
    assert after.ca_bundle != before.ca_bundle  # a new certificate (and port) each start
    assert "gpuctl-sim-kueue" in serving(manager_port(), after.ca_bundle)
    # start_kueue returned once the default queues apply again: no wait here
    batch, _ = clients(cluster)
    answer = batch.create_namespaced_job("team-c", user_job("after-restart", gpus=1), dry_run="All")
    assert (answer.metadata.labels["kueue.x-k8s.io/queue-name"], answer.spec.suspend) == ("default", True)


def test_an_adopted_namespaces_own_default_queue_is_left_alone(cluster: dict[str, str]) -> None:
    """A `default` LocalQueue gpuctl did not make keeps its ClusterQueue through `tenant add` and `tenant remove`."""
    from kubernetes import client, config

    api = config.new_client_from_config(cluster["KUBECONFIG"])
    v1, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    v1.create_namespace({"metadata": {"name": "adopted"}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": "theirs"},
        "spec": {"namespaceSelector": {}}})
    custom.create_namespaced_custom_object(GROUP, VERSION, "adopted", "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "default"},
        "spec": {"clusterQueue": "theirs"}})

    def default_queue() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(GROUP, VERSION, "adopted", "localqueues", "default")

    try:
        proc = run_gpuctl("tenant", "add", "adopted", "--gpus", "1", "--adopt", env=cluster)
        assert proc.returncode == 0, proc.stderr
        theirs = default_queue()
        assert theirs["spec"]["clusterQueue"] == "theirs" and not theirs["metadata"].get("labels"), theirs
        ours = custom.get_namespaced_custom_object(GROUP, VERSION, "adopted", "localqueues", "adopted")
        assert ours["spec"]["clusterQueue"] == "adopted"
        proc = run_gpuctl("tenant", "remove", "adopted", "--yes", env=cluster)
        assert proc.returncode == 0, proc.stderr
        assert default_queue()["spec"]["clusterQueue"] == "theirs"
        names = {q["metadata"]["name"] for q in custom.list_namespaced_custom_object(
            GROUP, VERSION, "adopted", "localqueues")["items"]}
        assert names == {"default"}
    finally:
        v1.delete_namespace("adopted")
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", "theirs")
