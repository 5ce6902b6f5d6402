"""A MIG change that never finishes, on one sim cluster (one A100-40GB GPU split 3g.20gb-2x2g.10gb), through the
real CLI, as issue 31 asks. The wedge is the one NVIDIA/gpu-operator #2833 reports, made by the sim's MIG manager
itself (node annotation sim.gpuctl.dev/fault-mig-wedge: mig-parted v0.15.0 reconfigure.go Run left after a GPU pod
did not stop: state `pending`, the operands' deploy labels `paused-for-mig-change`, the device plugin gone from the
node). `doctor` names it (exit 6) and `validate` fails its `doctor` check (exit 6); with the fault gone the MIG
manager still waits for a change of its label, and `doctor --fix` restores the deploy labels, re-labels the node and
waits for the manager's `success`: exit 0, the layout's MIG devices advertised again, `validate` exit 0. Then the
failed state (NVIDIA/mig-parted #484): a config the MIG ConfigMap lacks labelled by hand fails in the sim's
mig-parted, and --fix rolls back to the group's recorded layout; a `failed` left on the recorded config is
re-applied once."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import SimCluster, await_value, own_cluster
from tests.output_contract import faults, parsed

pytestmark = pytest.mark.integration

NAME = "doctor-mig"
WEDGE = "sim.gpuctl.dev/fault-mig-wedge"
WEDGED = "sim.gpuctl.dev/mig-wedged"
CONFIG, STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
RECORDED = "custom-3g.20gb-2x2g.10gb"
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
PAUSED = "paused-for-mig-change"
LAYOUT = {"nvidia.com/mig-3g.20gb": "1", "nvidia.com/mig-2g.10gb": "2"}


def labels(cluster: SimCluster, name: str) -> dict[str, str]:
    return cluster.node(name)["metadata"].get("labels") or {}


def mig_devices(cluster: SimCluster, name: str) -> dict[str, str]:
    """The node's allocatable MIG devices."""
    allocatable = cluster.node(name)["status"].get("allocatable") or {}
    return {k: v for k, v in allocatable.items() if k.startswith("nvidia.com/mig-") and v != "0"}


def doctor(cluster: SimCluster, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = cluster.gpuctl("-o", "json", "doctor", *args)
    data = parsed(proc.stdout, "json") if proc.stdout.strip() else []
    assert faults(data) == [], faults(data)
    return proc, data


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    with own_cluster(sim_env, tmp_path_factory, NAME, "--gpu", "a100-40gb", "--nodes", "1", "--gpus-per-node", "1",
                     "--mig-layout", "3g.20gb-2x2g.10gb") as made:
        yield made


@pytest.fixture(scope="module")
def node(cluster: SimCluster) -> str:
    [only] = [n["node"] for n in json.loads(cluster.gpuctl("-o", "json", "status").stdout)["nodes"]]
    assert (labels(cluster, only).get(CONFIG), labels(cluster, only).get(STATE)) == (RECORDED, "success")
    assert mig_devices(cluster, only) == LAYOUT
    return only


def test_a_wedged_change_is_named_fails_validate_and_is_finished_by_fix(cluster: SimCluster, node: str) -> None:
    cluster.kubectl("annotate", "node", node, f"{WEDGE}=true")
    await_value("the sim's MIG manager wedged", lambda: (labels(cluster, node).get(STATE),
                                                         labels(cluster, node).get(PLUGIN)), ("pending", PAUSED))
    await_value("the device plugin gone from the paused node", lambda: mig_devices(cluster, node), {})

    proc, data = doctor(cluster)
    assert proc.returncode == 6, proc.stderr
    assert [(f["check"], f["node"], f["fixable"]) for f in data] == [("mig-change-wedged", node, True)], data
    found = data[0]
    assert found["reference"] == "https://github.com/NVIDIA/gpu-operator/issues/2833"
    assert found["evidence"]["paused"][PLUGIN] == PAUSED and found["evidence"][STATE] == "pending"
    assert found["repair"] == ("gpuctl doctor --fix (restores the deploy labels client, dcgm, dcgm-exporter, "
                               f"device-plugin, gpu-feature-discovery, nvsm to true, then finishes the change to "
                               f"{RECORDED})"), found
    assert f"error: 1 finding: mig-change-wedged on node {node}" in proc.stderr, proc.stderr

    checked = cluster.gpuctl("-o", "json", "validate", "--timeout", "10")
    assert checked.returncode == 6, checked.stderr
    rows = {r["check"]: r for r in parsed(checked.stdout, "json")}
    assert rows["doctor"]["ok"] is False, rows
    assert rows["doctor"]["detail"].startswith(f"mig-change-wedged on node {node}: the MIG change is pending"), rows

    # The cause gone (the GPU pod stopped): the manager's run has returned, and it waits for its label to change.
    cluster.kubectl("annotate", "node", node, f"{WEDGE}-")
    fixed, left = doctor(cluster, "--fix")
    assert fixed.returncode == 0 and left == [], (fixed.stderr, left)
    err = fixed.stderr
    steps = [f"fix: node {node}: restoring the GPU operands' deploy labels the MIG manager paused to their values "
             "before the pause: ",
             f"fix: node {node}: finishing its wedged MIG change: re-labelling {CONFIG}={RECORDED} (removed with its "
             "state, then set again",
             f"fix: node {node}: waiting for the MIG manager to apply {RECORDED}",
             f"fix: node {node}: {RECORDED} applied ({STATE}=success)"]
    assert all(s in err for s in steps), err
    assert [err.index(s) for s in steps] == sorted(err.index(s) for s in steps), err  # each said in order
    now = labels(cluster, node)
    assert (now[CONFIG], now[STATE], now[PLUGIN]) == (RECORDED, "success", "true")
    assert not [k for k, v in now.items() if v == PAUSED], now
    assert WEDGED not in cluster.node(node)["metadata"].get("annotations", {})
    await_value("the layout's MIG devices advertised again", lambda: mig_devices(cluster, node), LAYOUT)

    checked = cluster.gpuctl("-o", "json", "validate")
    assert checked.returncode == 0, checked.stderr
    rows = {r["check"]: r for r in parsed(checked.stdout, "json")}
    assert rows["doctor"] == {"check": "doctor", "ok": True, "detail": "no errors found"}, rows


def test_a_failed_change_rolls_back_to_the_recorded_layout(cluster: SimCluster, node: str) -> None:
    # A config the MIG ConfigMap lacks: the sim's mig-parted refuses it (selected mig-config not present).
    cluster.kubectl("label", "node", node, f"{CONFIG}=all-1g.5gb", "--overwrite")
    await_value("the MIG manager failed", lambda: labels(cluster, node).get(STATE), "failed")

    proc, data = doctor(cluster)
    assert proc.returncode == 6, proc.stderr
    assert [(f["check"], f["node"], f["fixable"]) for f in data] == [("mig-change-failed", node, True)], data
    assert data[0]["repair"] == (f"gpuctl doctor --fix (rolls back from all-1g.5gb to {RECORDED}, its node group's "
                                 "recorded layout)")

    fixed, left = doctor(cluster, "--fix")
    assert fixed.returncode == 0 and left == [], (fixed.stderr, left)
    assert f"fix: node {node}: rolling back its failed MIG change to {CONFIG}={RECORDED}" in fixed.stderr
    assert (labels(cluster, node)[CONFIG], labels(cluster, node)[STATE]) == (RECORDED, "success")
    await_value("the layout's MIG devices advertised again", lambda: mig_devices(cluster, node), LAYOUT)


def test_a_failed_state_on_the_recorded_layout_is_re_applied_once(cluster: SimCluster, node: str) -> None:
    # What MIG manager v0.15.1 leaves after a failure on the config the node already names (labels restored).
    cluster.kubectl("label", "node", node, f"{STATE}=failed", "--overwrite")
    proc, data = doctor(cluster)
    assert proc.returncode == 6 and [f["check"] for f in data] == ["mig-change-failed"], (proc.stderr, data)
    assert data[0]["repair"] == f"gpuctl doctor --fix (re-applies {RECORDED}, its node group's recorded layout, once)"

    fixed, left = doctor(cluster, "--fix")
    assert fixed.returncode == 0 and left == [], (fixed.stderr, left)
    assert fixed.stderr.count("re-applying its node group's recorded MIG config, once: re-labelling") == 1
    assert labels(cluster, node)[STATE] == "success"
    await_value("the layout's MIG devices advertised", lambda: mig_devices(cluster, node), LAYOUT)
