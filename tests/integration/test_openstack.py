"""Issue 4, OpenStack half: the real CLI against the Keystone + Magnum emulator, whose clusters are
sim clusters, so the whole GPU-stack flow runs through the kubeconfig Magnum's certificates make."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from gpuctl.providers.sim.kwok import KwokCluster
from tests.conftest import run_gpuctl
from tests.emulators.openstack import OpenStackEmulator

PASSWORD = "emulated-Pa55word"
WRONG_PASSWORD = "not-the-Pa55word"
CLOUD = ("--cloud", "openstack")
CREATE = ("cluster", "create", *CLOUD, "--os-cloud", "emu", "--name", "os1", "--template", "gpu-template",
          "--gpu", "t4", "--nodes", "2", "--slices", "4", "--charts", "bundled")
STEPS = ["ensure-cluster", "ensure-nodegroup/gpu", "write-kubeconfig", "configure-nodes/gpu", "write-gpu-config",
         "install-nfd", "install-gpu-operator", "restart-device-plugin", "wait-capacity/gpu", "validate/gpu"]
QUOTA = "Resource CREATE failed: Forbidden: Quota exceeded for instances: Requested 1, but already used 20 of 20"


@pytest.fixture(scope="module")
def emulator(sim_env: dict[str, str]) -> Iterator[OpenStackEmulator]:
    emu = OpenStackEmulator(password=PASSWORD).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def os_env(emulator: OpenStackEmulator, sim_env: dict[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("openstack")
    clouds = emulator.write_clouds_yaml(root / "clouds.yaml", {"emu": PASSWORD, "wrong": WRONG_PASSWORD})
    env = {k: v for k, v in sim_env.items() if not k.startswith("OS_")}
    return dict(env, OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="emu", KUBECONFIG=str(root / "kubeconfig"),
                GPUCTL_SITE_CONFIG=str(root / "no-site.yaml"))


@pytest.fixture(scope="module")
def os1(os_env: dict[str, str], emulator: OpenStackEmulator) -> Iterator[dict[str, object]]:
    """One cluster for the module, created through the CLI; the last test deletes it."""
    proc = run_gpuctl("-o", "json", *CREATE, env=os_env)
    assert proc.returncode == 0, proc.stderr
    yield json.loads(proc.stdout)
    if any(c.name == "os1" for c in emulator.magnum.clusters.values()):
        run_gpuctl("cluster", "delete", *CLOUD, "--name", "os1", "--yes", env=os_env)


def core(env: dict[str, str]):  # noqa: ANN201 - kubernetes.client.CoreV1Api
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(env["KUBECONFIG"]))


def writes(emulator: OpenStackEmulator, since: int) -> list[tuple[str, str]]:
    return [r for r in emulator.requests[since:] if r[0] != "GET"]


def test_create_runs_the_whole_flow(os1: dict[str, object]) -> None:
    assert [s["step"] for s in os1["steps"]] == STEPS  # type: ignore[index]
    assert [s["outcome"] for s in os1["steps"]][:3] == ["created", "created", "updated"]  # type: ignore[index]
    assert {c["check"]: c["ok"] for c in os1["checks"]} == {  # type: ignore[union-attr]
        "capacity": True, "device-plugin": True, "smoke-test": True}
    assert os1["nodeGroups"] == [{"name": "gpu", "cluster": "os1", "gpu": "t4", "nodes": 2, "ready_nodes": 2,
                                  "gpus_per_node": 1}]


def test_magnum_records_carry_gpu_labels_and_flavor(emulator: OpenStackEmulator, os1: dict[str, object]) -> None:
    cluster = next(c for c in emulator.magnum.clusters.values() if c.name == "os1")
    assert cluster.labels["nvidia_gpu_enabled"] == "true"
    assert cluster.labels["kube_tag"] == "v1.36.3"  # merge_labels kept the template's labels
    assert cluster.merge_labels
    gpu = next(ng for ng in cluster.nodegroups.values() if ng.name == "gpu")
    assert (gpu.flavor.name, gpu.node_count, gpu.min_node_count, gpu.max_node_count, gpu.role) == (
        "g2.5xlarge", 2, 2, 2, "worker")


def test_kubeconfig_authenticates_by_client_certificate(os_env: dict[str, str], os1: dict[str, object]) -> None:
    from cryptography import x509

    path = Path(os_env["KUBECONFIG"])
    assert path.stat().st_mode & 0o777 == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "gpuctl-openstack-os1"
    user = next(u["user"] for u in doc["users"] if u["name"] == "gpuctl-openstack-os1")
    assert set(user) == {"client-certificate-data", "client-key-data"}  # no token, no exec plugin
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    assert cert.subject.rfc4514_string() == "O=system:masters,CN=admin"
    server = next(c["cluster"]["server"] for c in doc["clusters"] if c["name"] == "gpuctl-openstack-os1")
    assert server == KwokCluster("os1").endpoint()
    nodes = {n.metadata.name: n.metadata.labels for n in core(os_env).list_node().items}
    assert {name for name, labels in nodes.items() if labels.get("magnum.openstack.org/nodegroup") == "gpu"} == {
        "gpu-0", "gpu-1"}
    cache = Path(os_env["GPUCTL_STATE_DIR"]) / "openstack"
    [cluster_dir] = list(cache.iterdir())
    assert cluster_dir.stat().st_mode & 0o777 == 0o700
    assert {f.name: f.stat().st_mode & 0o777 for f in cluster_dir.iterdir()} == {
        "ca.crt": 0o600, "client.key": 0o600, "client.crt": 0o600}


def test_status_shows_four_slices_per_t4(os_env: dict[str, str], os1: dict[str, object]) -> None:
    proc = run_gpuctl("status", "-o", "json", env=os_env)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)
    assert [(n["node"], n["nodegroup"]) for n in nodes] == [("gpu-0", "gpu"), ("gpu-1", "gpu")]
    for node in nodes:
        assert node["allocatable"] == {"nvidia.com/gpu": 4}
        assert node["taints"] == ["nvidia.com/gpu=true:NoSchedule"]


def test_second_run_changes_nothing(os_env: dict[str, str], emulator: OpenStackEmulator,
                                    os1: dict[str, object]) -> None:
    before = len(emulator.requests)
    proc = run_gpuctl("-o", "json", *CREATE, env=os_env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False
    outcomes = {s["step"]: s["outcome"] for s in result["steps"]}
    assert set(outcomes.values()) == {"no change"}  # no smoke test either on a converged cluster
    assert writes(emulator, before) == []  # not even a new client certificate


def test_nodegroup_add_scale_delete(os_env: dict[str, str], emulator: OpenStackEmulator,
                                    os1: dict[str, object]) -> None:
    def extra_nodes() -> list[str]:
        selector = "magnum.openstack.org/nodegroup=extra"
        return sorted(n.metadata.name for n in core(os_env).list_node(label_selector=selector).items)

    ng = ("--cluster", "os1", "--name", "extra")
    proc = run_gpuctl("-o", "json", "nodegroup", "add", *CLOUD, *ng, "--gpu", "t4", "--max-nodes", "3", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["nodes"] == 1
    assert extra_nodes() == ["extra-0"]
    proc = run_gpuctl("-o", "json", "nodegroup", "scale", *CLOUD, *ng, "--nodes", "2", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert (json.loads(proc.stdout)[0]["nodes"], extra_nodes()) == (2, ["extra-0", "extra-1"])
    proc = run_gpuctl("-o", "json", "nodegroup", "list", *CLOUD, "--cluster", "os1", env=os_env)
    assert [g["name"] for g in json.loads(proc.stdout)] == ["extra", "gpu"]  # Magnum's defaults are not listed
    before = len(emulator.requests)
    proc = run_gpuctl("nodegroup", "delete", *CLOUD, "--cluster", "os1", "--name", "default-worker", "--yes",
                      env=os_env)
    assert proc.returncode == 2 and "default node group" in proc.stderr
    proc = run_gpuctl("nodegroup", "add", *CLOUD, *ng, "--gpu", "l4", env=os_env)
    assert proc.returncode == 2 and "flavor cannot change" in proc.stderr
    assert writes(emulator, before) == []
    proc = run_gpuctl("nodegroup", "delete", *CLOUD, *ng, "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert extra_nodes() == []
    proc = run_gpuctl("nodegroup", "scale", *CLOUD, *ng, "--nodes", "1", env=os_env)
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_failed_nodegroup_create_exits_4_with_reason_and_cleanup(os_env: dict[str, str], emulator: OpenStackEmulator,
                                                                 os1: dict[str, object]) -> None:
    emulator.fail_next_create(QUOTA)
    proc = run_gpuctl("nodegroup", "add", *CLOUD, "--cluster", "os1", "--name", "bad", "--gpu", "t4", env=os_env)
    assert proc.returncode == 4, proc.stderr
    assert "CREATE_FAILED" in proc.stderr and "Quota exceeded for instances" in proc.stderr
    cleanup = "gpuctl nodegroup delete --cloud openstack --cluster os1 --name bad --yes"
    assert cleanup in proc.stderr
    proc = run_gpuctl(*cleanup.split()[1:], env=os_env)
    assert proc.returncode == 0, proc.stderr


def test_failed_cluster_create_exits_4_with_reason_and_cleanup(os_env: dict[str, str],
                                                               emulator: OpenStackEmulator) -> None:
    emulator.fail_next_create(QUOTA)
    proc = run_gpuctl("cluster", "create", *CLOUD, "--name", "broken", "--template", "gpu-template", "--gpu", "t4",
                      env=os_env)
    assert proc.returncode == 4, proc.stderr
    assert "Magnum cluster 'broken' is CREATE_FAILED" in proc.stderr and "Quota exceeded" in proc.stderr
    cleanup = "gpuctl cluster delete --cloud openstack --name broken --yes"
    assert cleanup in proc.stderr
    proc = run_gpuctl(*cleanup.split()[1:], env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert not any(c.name == "broken" for c in emulator.magnum.clusters.values())


def test_missing_or_unknown_template_exits_2(os_env: dict[str, str], emulator: OpenStackEmulator) -> None:
    before = len(emulator.requests)
    proc = run_gpuctl("cluster", "create", *CLOUD, "--name", "new", "--gpu", "t4", env=os_env)
    assert proc.returncode == 2, proc.stderr
    assert "--template" in proc.stderr
    assert writes(emulator, before) == []
    assert not KwokCluster("new").exists
    proc = run_gpuctl("cluster", "create", *CLOUD, "--name", "new", "--template", "nope", "--gpu", "t4", env=os_env)
    assert proc.returncode == 2 and "ClusterTemplate nope could not be found" in proc.stderr


def test_wrong_or_missing_credentials_exit_3_without_the_password(os_env: dict[str, str], tmp_path: Path) -> None:
    for args in (("cluster", "list", *CLOUD, "--os-cloud", "wrong"),
                 ("-vv", "cluster", "create", *CLOUD, "--os-cloud", "wrong", "--name", "x", "--template", "t",
                  "--gpu", "t4")):
        proc = run_gpuctl(*args, env=os_env)
        assert proc.returncode == 3, proc.stderr
        assert "HTTP 401" in proc.stderr and "--os-cloud" in proc.stderr
        assert WRONG_PASSWORD not in proc.stdout + proc.stderr
    proc = run_gpuctl("cluster", "list", *CLOUD, "--os-cloud", "nope", env=os_env)
    assert proc.returncode == 3 and "nope" in proc.stderr and "clouds.yaml" in proc.stderr
    no_config = {k: v for k, v in os_env.items() if k not in ("OS_CLOUD", "OS_CLIENT_CONFIG_FILE")}
    proc = run_gpuctl("cluster", "list", *CLOUD, env=dict(no_config, HOME=str(tmp_path)))  # no ~/.config/openstack
    assert proc.returncode == 3 and "OS_CLOUD" in proc.stderr


def test_throttling_is_retried_then_exits_4(os_env: dict[str, str], emulator: OpenStackEmulator) -> None:
    emulator.throttled = 2
    assert run_gpuctl("cluster", "list", *CLOUD, env=os_env).returncode == 0
    emulator.throttled = 100
    try:
        proc = run_gpuctl("cluster", "list", *CLOUD, env=os_env)
    finally:
        emulator.throttled = 0
    assert proc.returncode == 4 and "throttling" in proc.stderr


def test_emulator_speaks_magnum_microversions(emulator: OpenStackEmulator) -> None:
    auth = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "demo", "domain": {"name": "Default"}, "password": PASSWORD}}}}}
    resp = requests.post(f"{emulator.url}/identity/v3/auth/tokens", json=auth, timeout=10)
    assert resp.status_code == 201
    token = resp.headers["X-Subject-Token"]
    types = [s["type"] for s in resp.json()["token"]["catalog"]]
    assert "container-infra" in types
    url = f"{emulator.url}/v1/clusters"
    assert requests.get(url, timeout=10).status_code == 401
    resp = requests.get(url, headers={"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.1"}, timeout=10)
    assert resp.status_code == 406 and resp.json()["errors"][0]["status"] == 406
    resp = requests.get(f"{url}/nope/nodegroups", headers={"X-Auth-Token": token}, timeout=10)
    assert resp.status_code == 406  # node groups need microversion >= 1.9 (no header: 1.1)


def test_a_rerun_after_an_interrupted_create_does_not_create_twice(os_env: dict[str, str],
                                                                   emulator: OpenStackEmulator) -> None:
    """Magnum writes a record after its 202 (the conductor's work); here it takes 8 s. The first gpuctl is
    killed while it waits; the rerun must wait for that record, not POST a second cluster of the name."""
    import signal
    import subprocess
    import sys
    import time

    emulator.magnum.record_delay = 8.0
    posts = emulator.requests.count(("POST", "/v1/clusters"))
    args = ("cluster", "create", *CLOUD, "--name", "slow", "--template", "gpu-template", "--gpu", "t4",
            "--charts", "bundled", "--no-validate")
    first = subprocess.Popen([sys.executable, "-m", "gpuctl", *args], env=os_env, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stderr is not None
        for line in first.stderr:
            if "waiting for Magnum cluster 'slow': not visible yet" in line:
                break
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait(timeout=30)
        emulator.magnum.record_delay = 0.0
    started = time.monotonic()
    proc = run_gpuctl(*args, env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert "an earlier run asked Magnum to create cluster 'slow'" in proc.stderr
    assert emulator.requests.count(("POST", "/v1/clusters")) - posts == 1
    assert time.monotonic() - started < 120
    proc = run_gpuctl("cluster", "delete", *CLOUD, "--name", "slow", "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr


def test_delete_of_an_adopted_cluster_removes_only_gpuctl_node_groups(os_env: dict[str, str],
                                                                       emulator: OpenStackEmulator) -> None:
    emulator.seed_cluster("legacy", {"theirs": {}, "ours": {"gpuctl_managed": "true"}})
    proc = run_gpuctl("cluster", "delete", *CLOUD, "--name", "legacy", "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert "not created by gpuctl" in proc.stderr
    legacy = next(c for c in emulator.magnum.clusters.values() if c.name == "legacy")
    assert sorted(ng.name for ng in legacy.nodegroups.values()) == ["default-master", "default-worker", "theirs"]


def test_cluster_delete_removes_what_was_made(os_env: dict[str, str], emulator: OpenStackEmulator,
                                              os1: dict[str, object]) -> None:
    proc = run_gpuctl("cluster", "delete", *CLOUD, "--name", "os1", env=os_env)
    assert proc.returncode == 2 and "--yes" in proc.stderr  # asks first
    proc = run_gpuctl("cluster", "delete", *CLOUD, "--name", "os1", "--yes", env=os_env)
    assert proc.returncode == 0, proc.stderr
    assert not any(c.name == "os1" for c in emulator.magnum.clusters.values())
    assert not KwokCluster("os1").exists
    assert not (Path(os_env["GPUCTL_STATE_DIR"]) / "openstack").exists() or not any(
        (Path(os_env["GPUCTL_STATE_DIR"]) / "openstack").iterdir())
    doc = yaml.safe_load(Path(os_env["KUBECONFIG"]).read_text())
    assert "gpuctl-openstack-os1" not in [c["name"] for c in doc.get("contexts") or []]
