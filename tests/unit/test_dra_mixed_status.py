"""`gpuctl status` where NVIDIA's DRA driver serves some node groups and the device plugin the others (a group's
`dra: true`, ops/platform/dra_groups.py): which agent serves a node is decided per node (model.dra.dra_served,
ops.devices.DraServing), each row shows its own node's truth, and the summary counts both kinds (ops/status.py,
its table in cli/status.py). Every cluster read is patched: no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cli.status import MIXED_COLUMNS, summary_line, table_rows
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.dra import dra_served
from gpuctl.ops import devices, status
from gpuctl.util.output import document, table
from tests.output_contract import faults, table_faults

READY = KubeObject({"status": {"phase": "Running", "containerStatuses": [{"ready": True}]}})


def a_node(name: str, group: str, allocatable: int, labels: dict[str, str] | None = None) -> KubeObject:
    return KubeObject({"metadata": {"name": name, "labels": {
        L.NODEGROUP: group, L.GPU_MODEL: "t4", L.GPU_COUNT: "2", **(labels or {})}},
        "status": {"capacity": {"nvidia.com/gpu": str(allocatable)} if allocatable else {},
                   "allocatable": {"nvidia.com/gpu": str(allocatable)} if allocatable else {}}})


def two_devices(allocated: set[str]) -> devices.NodeDevices:
    return devices.NodeDevices(({"name": "gpu-0"}, {"name": "gpu-1"}), frozenset(allocated))


ON_DRA = {L.DRA_GROUP: "true", L.DEPLOY_DEVICE_PLUGIN: "false"}


@pytest.mark.parametrize(("labels", "published", "everywhere", "served"), [
    ({}, False, False, False),  # a group left on the device plugin, the driver confined to dra: true groups
    ({}, True, False, True),  # its devices in the driver's current slices
    (ON_DRA, False, False, True),  # moved to DRA, its kubelet plugin not publishing (yet): still DRA's, not missing
    ({}, False, True, True),  # DRA mode for every group: a node whose kubelet plugin is missing is still DRA's
    ({L.DRA_GROUP: "false"}, False, False, False),
])
def test_which_agent_serves_a_node(labels: dict[str, str], published: bool, everywhere: bool, served: bool) -> None:
    assert dra_served(labels, published, everywhere) is served


def test_no_driver_no_dra_node() -> None:
    serving = devices.DraServing(False, False, {})
    assert not serving.serves(a_node("a-0", "a", 0, ON_DRA))
    assert devices.DraServing(True, False, {}).serves(a_node("a-0", "a", 0, ON_DRA))


def gpu_status(monkeypatch: pytest.MonkeyPatch, nodes: list[KubeObject], serving: devices.DraServing,
               kubelet_plugins: dict[str, KubeObject]) -> list[dict[str, Any]]:
    monkeypatch.setattr(status, "gpu_nodes", lambda kube, nodegroup=None: nodes)
    plugins = {n.name: READY for n in nodes if n.labels.get(L.DEPLOY_DEVICE_PLUGIN) != "false"}
    monkeypatch.setattr(status, "pods_by_node", lambda kube, selector, what: (
        kubelet_plugins if selector == status.DRA_PLUGIN_SELECTOR else plugins))
    monkeypatch.setattr(status, "read_dra_serving", lambda kube: serving)
    monkeypatch.setattr(status, "gpu_operator", lambda kube: None)
    return status.gpu_status(None)  # type: ignore[arg-type]  # every read is patched


@pytest.fixture
def mixed(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Group a moved to DRA (a-0 publishes 2 devices, 1 allocated; a-1's kubelet plugin not ready yet), group b
    on the device plugin (2 GPUs allocatable), the driver confined to dra: true nodes."""
    nodes = [a_node("a-0", "a", 0, ON_DRA), a_node("a-1", "a", 0, ON_DRA), a_node("b-0", "b", 2)]
    serving = devices.DraServing(True, False, {"a-0": two_devices({"gpu-1"})})
    return gpu_status(monkeypatch, nodes, serving, {"a-0": READY})


def test_each_row_shows_its_own_nodes_truth(mixed: list[dict[str, Any]]) -> None:
    rows = {r["node"]: r for r in mixed}
    b = rows["b-0"]  # not "devices 0, kubelet plugin missing": the device plugin serves its 2 GPUs
    assert (b["served_by"], b["allocatable"], b["device_plugin"]) == ("device-plugin", {"nvidia.com/gpu": 2}, "ready")
    assert not {"devices", "allocated", "free", "kubelet_plugin"} & set(b)
    a = rows["a-0"]
    assert (a["served_by"], a["devices"], a["allocated"], a["free"], a["kubelet_plugin"]) == ("dra", 2, 1, 1, "ready")
    assert (rows["a-1"]["served_by"], rows["a-1"]["devices"], rows["a-1"]["kubelet_plugin"]) == ("dra", 0, "missing")
    assert status.status_columns(mixed) == status.MIXED_COLUMNS


def test_the_summary_counts_both_kinds(mixed: list[dict[str, Any]]) -> None:
    summary = status.status_summary(mixed)
    assert summary == {"device_plugin": {"nodes": 1, "gpus": 2, "allocatable": {"nvidia.com/gpu": 2}},
                       "dra": {"nodes": 2, "gpus": 4, "devices": 2, "allocated": 1, "free": 1}}
    assert faults(document({"nodes": mixed, "summary": summary})) == []
    assert summary_line(summary).splitlines() == [  # wrapped to the table's 80 columns
        "served: 1 node by the device plugin (2 nvidia.com/gpu allocatable), 2 nodes by",
        "  DRA (2 devices: 1 allocated, 1 free)"]


def test_the_mixed_table_within_80_columns(mixed: list[dict[str, Any]]) -> None:
    text = table(table_rows(mixed, True), MIXED_COLUMNS)
    assert "missing" not in table(table_rows(mixed[:1], True), ["device_plugin"])  # off by design on a DRA node
    assert table_faults(text) == [] and table_faults(summary_line(status.status_summary(mixed)) + "\n") == [], text
    header, *lines = text.splitlines()
    assert header.split() == ["NODE", "NODEGROUP", "GPUS", "SERVED_BY", "ALLOCATABLE", "DEVICES", "FREE"]
    assert [line.split() for line in lines] == [["a-0", "a", "2", "dra", "-", "2", "1"],
                                                ["a-1", "a", "2", "dra", "-", "0", "0"],
                                                ["b-0", "b", "2", "device-plugin", "nvidia.com/gpu=2", "-", "-"]]


def test_one_kind_keeps_its_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group on DRA (the driver confined to no label): every node DRA's, the DRA table; no driver: the
    device plugin's."""
    nodes = [a_node("a-0", "a", 0), a_node("b-0", "b", 0)]
    rows = gpu_status(monkeypatch, nodes, devices.DraServing(True, True, {"a-0": two_devices(set())}), {})
    assert [(r["served_by"], r["devices"], r["kubelet_plugin"]) for r in rows] == [("dra", 2, "missing"),
                                                                                  ("dra", 0, "missing")]
    assert status.status_columns(rows) == status.DRA_COLUMNS
    rows = gpu_status(monkeypatch, [a_node("b-0", "b", 2)], devices.DraServing(False, False, {}), {})
    assert [r["served_by"] for r in rows] == ["device-plugin"] and "devices" not in rows[0]
    assert status.status_columns(rows) == status.COLUMNS


def test_validate_checks_a_mixed_cluster_group_by_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """validate without --nodegroup where gpuctl's driver serves group a and the device plugin b: one pass per
    group (each the way it is served); one agent for all, or a node of no group: one pass, as before."""
    from gpuctl.ops import validate

    monkeypatch.setattr(validate, "dra_mode", lambda kube: True)
    monkeypatch.setattr(validate, "serves_groups_only", lambda kube: True)
    mixed = [a_node("a-0", "a", 0, ON_DRA), a_node("b-0", "b", 2), a_node("a-1", "a", 0, ON_DRA)]
    assert validate.mixed_groups(None, mixed) == ["a", "b"]  # type: ignore[arg-type]  # reads patched
    assert validate.mixed_groups(None, mixed[:1]) == []  # type: ignore[arg-type]
    loose = KubeObject({"metadata": {"name": "x", "labels": {L.GPU_MODEL: "t4"}}})  # of no node group
    assert validate.mixed_groups(None, [*mixed, loose]) == []  # type: ignore[arg-type]
    monkeypatch.setattr(validate, "serves_groups_only", lambda kube: False)  # the driver serves every node
    assert validate.mixed_groups(None, mixed) == []  # type: ignore[arg-type]
