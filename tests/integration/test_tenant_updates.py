"""Changing a team after its first `tenant add`, through the real CLI: an update keeps what the command does
not name and prints each change as before -> after; a quota lowered below what the team's pods request now
is refused without --yes; `tenant remove` returns once the namespace is gone, and a second one has nothing
to remove; a declined prompt says nothing changed; tenants added before Kueue get their queues from the next
`cluster create --kueue` (and `plan` lists that step). The first four run on the shared sim cluster and leave
it as they found it; the Kueue case makes a cluster of its own (Kueue is built on first use)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster, sim_spec
from tests.support.ops import granted

pytestmark = pytest.mark.integration

TEAM = "team-upd"
QUOTA = "gpuctl-gpu-quota"


def gpuctl(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl("--kubeconfig", str(cluster.kubeconfig), *args, env=cluster.env)


def add(cluster: SimCluster, *flags: str) -> tuple[dict[str, Any], list[str]]:
    """`tenant add TEAM FLAGS -o json`: its JSON and its before -> after lines (stderr)."""
    proc = gpuctl(cluster, "-o", "json", "tenant", "add", TEAM, *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), [line.strip() for line in proc.stderr.splitlines() if " -> " in line]


def held(cluster: SimCluster) -> dict[str, str]:
    return granted(cluster.core().read_namespaced_resource_quota(QUOTA, TEAM).spec.hard)


def group_of(cluster: SimCluster) -> list[str] | None:
    from kubernetes import client, config

    rbac = client.RbacAuthorizationV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    bindings = {b.metadata.name: b for b in rbac.list_namespaced_role_binding(TEAM).items}
    return [s.name for s in bindings["gpuctl-tenant"].subjects] if "gpuctl-tenant" in bindings else None


@pytest.fixture(scope="module")
def team(sim_cluster: SimCluster) -> Iterator[SimCluster]:
    """TEAM made with 2 GPUs and one 3g.20gb instance; removed at the end, whatever the tests left."""
    out, changes = add(sim_cluster, "--gpus", "2", "--mig", "3g.20gb=1")
    assert out["change"] == "created" and out["before"] is None
    assert changes == ["quota nvidia.com/gpu: 0 -> 2", "quota nvidia.com/mig-3g.20gb: 0 -> 1"]
    yield sim_cluster
    gpuctl(sim_cluster, "tenant", "remove", TEAM, "--yes")


def test_an_update_keeps_what_it_does_not_name_and_prints_before_and_after(team: SimCluster) -> None:
    out, changes = add(team, "--group", "ml-devs")  # issue 27: this used to empty the quota, silently
    assert out["change"] == "updated"
    assert changes == ["group: - -> ml-devs"]
    assert held(team) == {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/mig-3g.20gb": "1"}
    assert group_of(team) == ["ml-devs"]
    assert (out["before"]["gpus"], out["before"]["group"]) == (2, None)
    assert out["after"] == {"name": TEAM, "gpus": 2, "mig": {"3g.20gb": 1}, "group": "ml-devs", "borrow": 0,
                            "lend": None, "cohort": "gpuctl"}
    assert out["changes"] == changes

    out, changes = add(team, "--group", "ml-devs")
    assert (out["change"], changes) == ("no change", [])

    out, changes = add(team, "--gpus", "4", "--mig", "1g.5gb=2")  # MIG merges per profile
    assert out["change"] == "updated"
    assert changes == ["quota nvidia.com/gpu: 2 -> 4", "quota nvidia.com/mig-1g.5gb: 0 -> 2"]
    assert held(team) == {"requests.nvidia.com/gpu": "4", "requests.nvidia.com/mig-1g.5gb": "2",
                          "requests.nvidia.com/mig-3g.20gb": "1"}
    assert group_of(team) == ["ml-devs"]

    out, changes = add(team, "--group", "none", "--mig", "1g.5gb=0")  # the ways back to a default
    assert changes == ["quota nvidia.com/mig-1g.5gb: 2 -> 0", "group: ml-devs -> -"]
    assert group_of(team) is None  # the binding went with the group
    assert held(team) == {"requests.nvidia.com/gpu": "4", "requests.nvidia.com/mig-3g.20gb": "1"}


def test_shrinking_below_what_the_pods_request_is_refused_without_yes(team: SimCluster) -> None:
    v1 = team.core()
    add(team, "--gpus", "4")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
           "spec": {"containers": [{"name": "c", "image": "example/train:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}}
    v1.create_namespaced_pod(TEAM, pod)  # quota admission charges it to status.used as it is created
    assert v1.read_namespaced_resource_quota(QUOTA, TEAM).status.used["requests.nvidia.com/gpu"] == "3"

    refused = gpuctl(team, "tenant", "add", TEAM, "--gpus", "1")
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: --gpus: the quota on nvidia.com/gpu would be 1, below the 3 the team's pods "
                           "request now"), line
    assert "pass --yes to lower it anyway" in line
    assert held(team)["requests.nvidia.com/gpu"] == "4"  # nothing written

    out, changes = add(team, "--gpus", "3")  # down to what is used: no refusal
    assert changes == ["quota nvidia.com/gpu: 4 -> 3"]
    out, changes = add(team, "--gpus", "1", "--yes")
    assert (out["change"], changes) == ("updated", ["quota nvidia.com/gpu: 3 -> 1"])
    assert held(team)["requests.nvidia.com/gpu"] == "1"


def test_a_declined_prompt_says_nothing_changed(team: SimCluster) -> None:
    controller, terminal = pty.openpty()  # confirmation is asked only on a terminal
    try:
        os.write(controller, b"n\n")
        proc = subprocess.run([sys.executable, "-m", "gpuctl", "--kubeconfig", str(team.kubeconfig), "tenant",
                               "remove", TEAM], stdin=terminal, capture_output=True, text=True, env=team.env,
                              timeout=120)
    finally:
        os.close(terminal)
        os.close(controller)
    assert proc.returncode == 1, proc.stderr
    assert "Delete tenant 'team-upd'?" in proc.stderr and "nothing changed" in proc.stderr, proc.stderr
    assert team.core().read_namespace(TEAM).metadata.deletion_timestamp is None


def test_remove_waits_for_the_namespace_and_a_second_remove_has_nothing_to_remove(team: SimCluster) -> None:
    v1 = team.core()
    assert v1.list_namespaced_pod(TEAM).items  # content the namespace controller deletes first
    proc = gpuctl(team, "tenant", "remove", TEAM, "--yes")
    assert proc.returncode == 0, proc.stderr
    assert f"tenant '{TEAM}': deleted" in proc.stderr
    assert TEAM not in {ns.metadata.name for ns in v1.list_namespace().items}  # gone when the command returned

    again = gpuctl(team, "tenant", "remove", TEAM, "--yes")
    assert again.returncode == 0, again.stderr
    assert f"tenant '{TEAM}': nothing to remove" in again.stderr and "deleted" not in again.stderr

    listed = gpuctl(team, "-o", "json", "tenant", "list")
    assert TEAM not in {r["tenant"] for r in json.loads(listed.stdout)}


# -- tenants added before Kueue ---------------------------------------------------------------------------

KUEUE_CLUSTER = "tupd-kueue"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
CREATE = ("cluster", "create", "--cloud", "sim", "--name", KUEUE_CLUSTER, "--gpu", "a100-40gb", "--nodes", "1",
          "--no-validate")


@pytest.fixture(scope="module")
def pre_kueue(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """A cluster made without Kueue, with one tenant."""
    kubeconfig = tmp_path_factory.mktemp("tupd") / "kubeconfig"
    env = dict(sim_env, KUBECONFIG=str(kubeconfig))
    cluster = SimCluster(KUEUE_CLUSTER, kubeconfig, env)
    proc = gpuctl(cluster, *CREATE)
    assert proc.returncode == 0, proc.stderr
    try:
        proc = gpuctl(cluster, "-v", "tenant", "add", "early", "--gpus", "2", "--group", "early-devs")  # -v: the note
        assert proc.returncode == 0, proc.stderr
        assert "Kueue is not installed" in proc.stderr
        yield cluster
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", KUEUE_CLUSTER, "--yes", env=env)
        assert proc.returncode == 0, proc.stderr


def test_tenants_added_before_kueue_get_their_queues(pre_kueue: SimCluster, tmp_path: Path) -> None:
    spec = tmp_path / "kueue.yaml"
    spec.write_text(sim_spec(KUEUE_CLUSTER, "{name: gpu, gpu: a100-40gb, nodes: 1}")
                    + "  kueue: {enabled: true}\n  gpuOperator: {validate: false}\n")
    planned = gpuctl(pre_kueue, "-o", "json", "plan", "-f", str(spec))
    assert planned.returncode == 0, planned.stderr
    steps = [p["step"] for p in json.loads(planned.stdout)]
    assert steps.index("install-kueue") < steps.index("ensure-queues/early")
    assert {p["step"]: p["action"] for p in json.loads(planned.stdout)}["ensure-queues/early"] == "created"

    proc = gpuctl(pre_kueue, "-o", "json", *CREATE, "--kueue")
    assert proc.returncode == 0, proc.stderr
    outcomes = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert outcomes["install-kueue"] == "created" and outcomes["ensure-queues/early"] == "created"

    from kubernetes import client, config

    kueue = client.CustomObjectsApi(config.new_client_from_config(str(pre_kueue.kubeconfig)))
    queue = kueue.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "early")
    [group] = queue["spec"]["resourceGroups"]
    assert [str(r["nominalQuota"]) for f in group["flavors"] for r in f["resources"]] == ["2"]  # its quota now
    locals_ = {q["metadata"]["name"] for q in kueue.list_namespaced_custom_object(GROUP, VERSION, "early",
                                                                                 "localqueues")["items"]}
    assert locals_ == {"early", "default"}
    rows = {r["tenant"]: r for r in json.loads(gpuctl(pre_kueue, "-o", "json", "tenant", "list").stdout)}
    assert rows["early"]["queue"] and rows["early"]["group"] == "early-devs"

    again = gpuctl(pre_kueue, "-o", "json", *CREATE, "--kueue")  # queued now: no such step any more
    assert again.returncode == 0, again.stderr
    assert not [s for s in json.loads(again.stdout)["steps"] if s["step"].startswith("ensure-queues/")]
