"""`gpuctl doctor` on one sim cluster (2 T4 nodes, each GPU shared 2 ways, one tenant), through the real CLI: healthy,
it finds nothing (exit 0); with faults injected as they look on a real cluster it names each with its evidence
(exit 6); `doctor --fix` repairs the safe ones and names the rest; once those are repaired by the commands doctor
gave, it finds nothing again.

The faults: nvidia.com/mig.config.state=failed on a node (mig-parted #484's end state); the GPU fence's binding
deleted by hand; the device plugin's config race on the other node (k8s-device-plugin #1645), played by the sim's
device plugin through its fault annotation: the pod runs, the config label stays, allocatable is 0 until the pod
restarts (a patch of allocatable alone would be put back by the sim's next pass, as a kubelet would); a node's
GPU taint removed; the ClusterPolicy asking for a container toolkit below its security floor (v1.17.0)."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import run_gpuctl
from tests.integration.conftest import SimCluster
from tests.output_contract import faults, parsed, table_faults
from tests.support.sim import CONFIG_RACE, LOADED
from tests.support.tools import find_tool

pytestmark = pytest.mark.integration

NAME = "doctor"
TENANT = "team-a"
OLD_TOOLKIT = {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "v1.17.0"}


def gpuctl(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl("--kubeconfig", str(cluster.kubeconfig), *args, env=cluster.env)


def kubectl(cluster: SimCluster, *args: str) -> str:
    proc = subprocess.run([str(find_tool("kubectl")), "--kubeconfig", str(cluster.kubeconfig), *args],
                          env=cluster.env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout


def node_json(cluster: SimCluster, name: str) -> dict[str, Any]:
    return json.loads(kubectl(cluster, "get", "node", name, "-o", "json"))


def allocatable(cluster: SimCluster, name: str) -> str | None:
    return node_json(cluster, name)["status"].get("allocatable", {}).get("nvidia.com/gpu")


def await_value(what: str, read: Any, wanted: Any, timeout: float = 60.0) -> None:
    """Poll `read()` until it returns `wanted` (a decision of the sim's operator or a controller), or fail."""
    deadline = time.monotonic() + timeout
    while (got := read()) != wanted:
        assert time.monotonic() < deadline, f"{what}: still {got!r} after {timeout:.0f}s, wanted {wanted!r}"
        time.sleep(0.3)


def findings(cluster: SimCluster, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = gpuctl(cluster, "-o", "json", "doctor", *args)
    data = parsed(proc.stdout, "json")
    assert faults(data) == [], faults(data)
    return proc, data


def checks(found: list[dict[str, Any]]) -> set[str]:
    return {f["check"] for f in found}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    kubeconfig = tmp_path_factory.mktemp(NAME) / "kubeconfig"
    made = SimCluster(NAME, kubeconfig, dict(sim_env, KUBECONFIG=str(kubeconfig)))
    proc = gpuctl(made, "cluster", "create", "--name", NAME, "--gpu", "t4", "--nodes", "2", "--slices", "2")
    assert proc.returncode == 0, proc.stderr
    try:
        proc = gpuctl(made, "tenant", "add", TENANT, "--gpus", "2")
        assert proc.returncode == 0, proc.stderr
        yield made
    finally:
        proc = run_gpuctl("cluster", "delete", "--name", NAME, "--yes", env=made.env)
        assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def nodes(cluster: SimCluster) -> list[str]:
    status = json.loads(gpuctl(cluster, "-o", "json", "status").stdout)
    names = sorted(n["node"] for n in status["nodes"])
    assert len(names) == 2, status
    return names


def test_a_healthy_platform_has_no_finding(cluster: SimCluster, nodes: list[str]) -> None:
    proc, data = findings(cluster)
    assert (proc.returncode, data) == (0, []), proc.stderr
    table = gpuctl(cluster, "doctor")
    assert (table.returncode, table.stdout) == (0, "") and "nothing wrong found" in table.stderr


def test_doctor_names_each_fault_fix_repairs_the_safe_ones(cluster: SimCluster, nodes: list[str]) -> None:
    mig_node, race_node = nodes
    kubectl(cluster, "label", "node", mig_node, "nvidia.com/mig.config.state=failed", "--overwrite")
    kubectl(cluster, "delete", "validatingadmissionpolicybinding", "gpuctl-gpu-fence")
    kubectl(cluster, "annotate", "node", race_node, f"{CONFIG_RACE}=true", f"{LOADED}-")
    await_value(f"{race_node}'s plugin raced", lambda: allocatable(cluster, race_node), "0")
    kubectl(cluster, "taint", "node", mig_node, "nvidia.com/gpu=true:NoSchedule-")
    kubectl(cluster, "patch", "clusterpolicy", "cluster-policy", "--type", "merge",
            "-p", json.dumps({"spec": {"toolkit": OLD_TOOLKIT}}))

    # doctor blames a plugin only once its pod has run for the seconds a plugin takes to register, and the cluster's
    # plugin pods may be seconds old here: look until it names it (the unit tests hold the grace itself)
    deadline = time.monotonic() + 60
    while "plugin-serves-nothing" not in checks(data := findings(cluster)[1]):
        assert time.monotonic() < deadline, data
        time.sleep(0.5)
    proc, data = findings(cluster)
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.startswith("error: 5 findings: "), [f["check"] for f in data]
    by_check = {f["check"]: f for f in data}
    assert set(by_check) == {"security-floor", "mig-change-failed", "plugin-serves-nothing", "gpu-taint-missing",
                             "tenant-fence-missing"}, data
    security = by_check["security-floor"]
    assert (security["evidence"]["component"], security["evidence"]["version"]) == ("container-toolkit", "1.17.0")
    assert security["evidence"]["advisories"] == ["CVE-2026-24260", "CVE-2025-23266"]
    assert security["evidence"]["fixedVersion"] == "1.19.1" and security["fixable"] is False
    mig = by_check["mig-change-failed"]
    assert (mig["node"], mig["evidence"]["nvidia.com/mig.config.state"]) == (mig_node, "failed")
    assert mig["reference"] == "https://github.com/NVIDIA/mig-parted/issues/484"
    plugin = by_check["plugin-serves-nothing"]
    assert plugin["node"] == race_node and plugin["evidence"]["allocatable"] == {"nvidia.com/gpu": 0}
    assert plugin["evidence"]["nvidia.com/device-plugin.config"] and plugin["fixable"] is True
    assert plugin["reference"] == "https://github.com/NVIDIA/k8s-device-plugin/issues/1645"
    taint = by_check["gpu-taint-missing"]
    assert (taint["node"], taint["evidence"]["missing"]) == (mig_node, ["nvidia.com/gpu=true:NoSchedule"])
    fence = by_check["tenant-fence-missing"]
    assert fence["evidence"] == {"missing": ["ValidatingAdmissionPolicyBinding gpuctl-gpu-fence"],
                                 "tenants": [TENANT]}

    table = gpuctl(cluster, "doctor")
    assert table.returncode == 6
    rows, repairs = table.stdout.split("\n\n")
    assert table_faults(rows + "\n") == [] and len(rows.splitlines()) == 6, table.stdout
    assert f"node {race_node}: gpuctl doctor --fix" in repairs, repairs
    _, narrowed = findings(cluster, "--node", race_node)  # the node checks of that node, and the cluster's
    assert {f["check"] for f in narrowed} == {"security-floor", "plugin-serves-nothing", "tenant-fence-missing"}

    fixed = gpuctl(cluster, "-o", "json", "doctor", "--fix")
    assert fixed.returncode == 6, fixed.stderr
    assert f"fix: node {race_node}: restarting device-plugin pod" in fixed.stderr, fixed.stderr
    assert "fix: re-applying the GPU fence (ValidatingAdmissionPolicyBinding gpuctl-gpu-fence)" in fixed.stderr
    left = parsed(fixed.stdout, "json")
    assert {f["check"] for f in left} == {"security-floor", "mig-change-failed", "gpu-taint-missing"}, left
    assert allocatable(cluster, race_node) == "2"  # its new plugin pod registered the GPU, shared 2 ways
    kubectl(cluster, "get", "validatingadmissionpolicybinding", "gpuctl-gpu-fence")

    # The rest, repaired by the commands doctor named (the MIG state, on a GPU without MIG, by hand).
    taint_repair = next(f["repair"] for f in left if f["check"] == "gpu-taint-missing")
    security_repair = next(f["repair"] for f in left if f["check"] == "security-floor")
    for repair in (taint_repair, security_repair):
        words = shlex.split(repair)
        assert words[0] == "kubectl", repair
        kubectl(cluster, *words[1:])
    kubectl(cluster, "label", "node", mig_node, "nvidia.com/mig.config.state-")
    toolkits = lambda: {c["image"] for d in json.loads(kubectl(  # noqa: E731 (the operator's, where it runs one)
        cluster, "get", "daemonset", "-A", "-l", "app=nvidia-container-toolkit-daemonset", "-o", "json"))["items"]
        for c in d["spec"]["template"]["spec"]["containers"]}
    await_value("the toolkit DaemonSet's image", lambda: toolkits() <= {f"{OLD_TOOLKIT['repository']}/"
                                                                         "container-toolkit:v1.19.1"}, True)
    proc, data = findings(cluster)
    assert (proc.returncode, data) == (0, []), (proc.stderr, data)
