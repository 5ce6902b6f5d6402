"""`gpuctl status` marks unhealthy GPUs (gpuctl/ops/status.py, its table in gpuctl/cli/status.py) on nodes given as
the API server's JSON: the kubelet's record, capacity above allocatable (Kubernetes
pkg/kubelet/cm/devicemanager/manager.go, GetCapacity), counted per resource and as whole GPUs, and the table
within 80 columns."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cli.status import COLUMNS, gpus_cell, unhealthy_section
from gpuctl.kube.kube_object import KubeObject
from gpuctl.ops import status
from gpuctl.ops.devices import DraServing
from gpuctl.util.output import document, table
from tests.output_contract import faults, table_faults


def a_node(name: str, group: str, capacity: dict[str, str], allocatable: dict[str, str], gpus: int = 4,
           replicas: int = 1, mig: str | None = None) -> KubeObject:
    labels = {"gpuctl.dev/nodegroup": group, "gpuctl.dev/gpu": "a100-40gb" if mig else "t4",
              "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.replicas": str(replicas),
              "nvidia.com/gpu.sharing-strategy": "time-slicing" if replicas > 1 else "none"}
    if mig:
        labels["nvidia.com/mig.config"] = mig
    return KubeObject({"metadata": {"name": name, "labels": labels},
                       "status": {"capacity": {"cpu": "8", **capacity}, "allocatable": {"cpu": "7", **allocatable}}})


@pytest.fixture
def rows(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    nodes = [
        a_node("gpu-0", "gpu", {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"}),
        a_node("gpu-1", "gpu", {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "3"}),
        # one T4 of 4 failed, shared 4 ways: its 4 replicas leave allocatable
        a_node("inference-0", "inference", {"nvidia.com/gpu": "16"}, {"nvidia.com/gpu": "12"}, replicas=4),
        a_node("training-0", "training", {"nvidia.com/mig-1g.5gb": "14"}, {"nvidia.com/mig-1g.5gb": "13"}, gpus=2,
               mig="all-1g.5gb"),
    ]
    monkeypatch.setattr(status, "gpu_nodes", lambda kube, nodegroup=None: nodes)
    ready = {n.name: KubeObject({"status": {"phase": "Running", "containerStatuses": [{"ready": True}]}})
             for n in nodes}
    monkeypatch.setattr(status, "pods_by_node", lambda kube, selector, what: ready)
    monkeypatch.setattr(status, "read_dra_serving", lambda kube: DraServing(False, False, {}))
    monkeypatch.setattr(status, "gpu_operator", lambda kube: None)
    return status.gpu_status(None)  # type: ignore[arg-type]  # every read is patched: no cluster


def test_capacity_above_allocatable_is_unhealthy_by_resource_and_whole_gpu(rows: list[dict[str, Any]]) -> None:
    found = {r["node"]: (r["unhealthy"], r["unhealthy_gpus"]) for r in rows}
    assert found == {"gpu-0": ({}, 0), "gpu-1": ({"nvidia.com/gpu": 1}, 1),
                     "inference-0": ({"nvidia.com/gpu": 4}, 1),  # 4 replicas: one GPU
                     "training-0": ({"nvidia.com/mig-1g.5gb": 1}, 0)}  # a MIG device, not a whole GPU
    data = document({"nodes": rows})
    assert faults(data) == [] and data["nodes"][1]["unhealthyGpus"] == 1
    assert data["nodes"][1]["allocatable"] == {"nvidia.com/gpu": 3}  # allocatable stays the kubelet's


def test_the_table_marks_them_within_80_columns(rows: list[dict[str, Any]]) -> None:
    assert [gpus_cell(r) for r in rows] == ["4", "3/4!", "3/4!", "2!"]
    marked = table([{**r, "gpus": gpus_cell(r)} for r in rows], COLUMNS)
    assert max(map(len, marked.splitlines())) == max(map(len, table(rows, COLUMNS).splitlines()))  # no wider
    whole = [r for r in rows if r["node"] != "training-0"]  # (a MIG row's allocatable alone passes 80 columns)
    text = table([{**r, "gpus": gpus_cell(r)} for r in whole], COLUMNS)
    section = unhealthy_section(rows)
    assert section is not None
    assert table_faults(text) == [] and table_faults(section + "\n") == [], text + section
    lines = section.splitlines()
    assert lines[2:] == ["  gpu-1: 1 of 4 nvidia.com/gpu (1 GPU)", "  inference-0: 4 of 16 nvidia.com/gpu (1 GPU)",
                         "  training-0: 1 of 14 nvidia.com/mig-1g.5gb"]
    assert unhealthy_section([r for r in rows if r["node"] == "gpu-0"]) is None  # all healthy: no section
    # a plugin that went away: the kubelet marks all its devices unhealthy at once (PluginDisconnected)
    gone = {**rows[2], "device_plugin": "missing"}
    assert unhealthy_section([gone]).splitlines()[-2:] == [  # type: ignore[union-attr]
        "  inference-0: 4 of 16 nvidia.com/gpu (1 GPU); no ready device plugin: the",
        "    kubelet marks all of a departed plugin's devices"]
