"""The OpenStack provider against faults the real services (tests/beds/openstack, see
test_openstack_magnum.py) cannot be made to show: the Keystone + Magnum emulator fails a create with a
quota reason, throttles, and delays a new record long enough to kill gpuctl while it waits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.conftest import run_gpuctl
from tests.emulators.openstack import OpenStackEmulator

pytestmark = pytest.mark.integration

PASSWORD = "emulated-Pa55word"
CLOUD = ("--cloud", "openstack")
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
    clouds = emulator.write_clouds_yaml(root / "clouds.yaml", {"emu": PASSWORD})
    env = {k: v for k, v in sim_env.items() if not k.startswith("OS_")}
    return dict(env, OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="emu", KUBECONFIG=str(root / "kubeconfig"),
                GPUCTL_SITE_CONFIG=str(root / "no-site.yaml"))


def test_failed_nodegroup_create_exits_4_with_reason_and_cleanup(os_env: dict[str, str],
                                                                 emulator: OpenStackEmulator) -> None:
    emulator.seed_cluster("seeded", {})
    emulator.fail_next_create(QUOTA)
    proc = run_gpuctl("nodegroup", "add", *CLOUD, "--cluster", "seeded", "--name", "bad", "--gpu", "t4", env=os_env)
    assert proc.returncode == 4, proc.stderr
    assert "CREATE_FAILED" in proc.stderr and "Quota exceeded for instances" in proc.stderr
    cleanup = "gpuctl nodegroup delete --cloud openstack --cluster seeded --name bad --yes"
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
    auth: dict[str, Any] = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
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
