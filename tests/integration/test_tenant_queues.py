"""Kueue queues of tenants on the session's sim cluster, against Kueue's real CRDs (v0.19.2, unmodified, from
../shared/upstream): what `tenant add` writes must be accepted by their schemas (server-side apply with
strict field validation) and read back as Kueue defines it. Admission itself is the Kueue controller's
(tests/integration/test_kueue_controller.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration
KUEUE_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "upstream" / "kueue-v0.19.2"
GROUP = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture(scope="module")
def kueue(sim_cluster: SimCluster) -> Iterator[Any]:
    """The cluster with Kueue's CRDs (they stay: later tests see a cluster where Kueue's API is served)."""
    from kubernetes import client, config

    kubectl = find_tool("kubectl")
    assert kubectl is not None
    proc = subprocess.run([str(kubectl), "--kubeconfig", str(sim_cluster.kubeconfig), "apply", "--server-side",
                           "-f", str(KUEUE_CRDS)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    api = client.CustomObjectsApi(config.new_client_from_config(str(sim_cluster.kubeconfig)))
    deadline = time.monotonic() + 60
    while True:  # served once established
        try:
            api.list_cluster_custom_object(*GROUP, "clusterqueues")
            break
        except client.exceptions.ApiException:
            assert time.monotonic() < deadline, "Kueue's CRDs were not served within 60 s"
            time.sleep(0.5)
    yield api


def gpuctl(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl("--kubeconfig", str(cluster.kubeconfig), *args, env=cluster.env)


def test_tenant_add_writes_queues_the_real_crds_accept(sim_cluster: SimCluster, kueue: Any) -> None:
    add = ("tenant", "add", "team-q", "--gpus", "4", "--mig", "3g.20gb=2", "--borrow", "2", "--lend", "1",
           "--cohort", "pool")
    proc = gpuctl(sim_cluster, "-o", "json", *add)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["quota"] == {"nvidia.com/gpu": 6, "nvidia.com/mig-3g.20gb": 4}

    queue = kueue.get_cluster_custom_object(*GROUP, "clusterqueues", "team-q")
    assert queue["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"}
    assert queue["spec"]["cohortName"] == "pool"
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-q"}}
    [group] = queue["spec"]["resourceGroups"]  # no node offers MIG devices: only whole GPUs have a flavor
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    [flavor] = group["flavors"]
    assert flavor["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2",
                                    "lendingLimit": "1"}]  # quantities, as Kueue itself writes them back
    assert queue["spec"]["queueingStrategy"] == "BestEffortFIFO"  # Kueue's CRD defaulted what gpuctl left out

    rf = kueue.get_cluster_custom_object(*GROUP, "resourceflavors", flavor["name"])
    selector = ",".join(f"{k}={v}" for k, v in rf["spec"]["nodeLabels"].items())
    gpu_nodes = {n.metadata.name for n in sim_cluster.core().list_node(label_selector="gpuctl.dev/gpu").items}
    assert {n.metadata.name for n in sim_cluster.core().list_node(label_selector=selector).items} == gpu_nodes
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in \
        rf["spec"]["tolerations"]
    local = kueue.get_namespaced_custom_object(*GROUP, "team-q", "localqueues", "team-q")
    assert local["spec"]["clusterQueue"] == "team-q"

    again = gpuctl(sim_cluster, "-o", "json", *add)
    assert again.returncode == 0 and json.loads(again.stdout)["change"] == "no change", again.stderr

    rows = {r["tenant"]: r for r in json.loads(gpuctl(sim_cluster, "-o", "json", "tenant", "list").stdout)}
    assert rows["team-q"]["cohort"] == "pool"
    assert rows["team-q"]["queue"] == {flavor["name"]: {"nvidia.com/gpu": {"nominal": 4, "borrowed": 0, "used": 0}}}
    table = gpuctl(sim_cluster, "-o", "wide", "tenant", "list").stdout  # queues: -o wide
    assert f"{flavor['name']}/nvidia.com/gpu=0/4(+0)" in table

    proc = gpuctl(sim_cluster, "tenant", "remove", "team-q", "--yes")
    assert proc.returncode == 0, proc.stderr
    names = {q["metadata"]["name"] for q in kueue.list_cluster_custom_object(*GROUP, "clusterqueues")["items"]}
    assert "team-q" not in names
    flavors = {f["metadata"]["name"] for f in kueue.list_cluster_custom_object(*GROUP, "resourceflavors")["items"]}
    used = {f["name"] for q in kueue.list_cluster_custom_object(*GROUP, "clusterqueues")["items"]
            for g in q["spec"].get("resourceGroups") or [] for f in g["flavors"]}
    assert flavor["name"] not in flavors or flavor["name"] in used  # gone unless another team's queue uses it


def test_someone_elses_cluster_queue_is_refused_before_any_write(sim_cluster: SimCluster, kueue: Any) -> None:
    theirs = {"apiVersion": "/".join(GROUP), "kind": "ClusterQueue", "metadata": {"name": "team-x"},
              "spec": {"namespaceSelector": {}}}
    kueue.create_cluster_custom_object(*GROUP, "clusterqueues", theirs)
    try:
        proc = gpuctl(sim_cluster, "tenant", "add", "team-x", "--gpus", "1")
        assert proc.returncode == 2, proc.stderr
        assert "NAME: Kueue ClusterQueue 'team-x' exists and gpuctl did not create it" in proc.stderr
        assert "team-x" not in {n.metadata.name for n in sim_cluster.core().list_namespace().items}
    finally:
        kueue.delete_cluster_custom_object(*GROUP, "clusterqueues", "team-x")


def test_bad_queue_inputs_exit_2_naming_the_flag(sim_cluster: SimCluster, kueue: Any) -> None:
    for args, message in [(["--borrow", "-1"], "--borrow"), (["--lend", "x"], "--lend"),
                          (["--cohort", "Not_A_Name"], "--cohort: 'Not_A_Name' is not a valid name")]:
        proc = gpuctl(sim_cluster, "tenant", "add", "team-bad", "--gpus", "1", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
