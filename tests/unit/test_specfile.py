"""The GpuCluster file: a good spec, and a corpus of broken ones each failing with its field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuctl.api import load_spec
from gpuctl.model.sharing import Sharing
from gpuctl.model.specfile import apply_defaults, parse, validate
from gpuctl.providers import capabilities_of
from gpuctl.util.errors import UsageError

GOOD = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"


def good() -> dict:
    return yaml.safe_load(GOOD.read_text())


def test_good_spec_parses_defaults_and_validates() -> None:
    doc, groups = load_spec(GOOD)
    assert doc.name == "platform" and doc.cloud == "sim" and doc.charts == "bundled"
    inference, training = groups
    assert inference.doc.sharing == Sharing("time-slicing", 4) and inference.gpus_per_node == 1
    assert [str(t) for t in inference.taints] == ["nvidia.com/gpu=true:NoSchedule"]
    assert training.mig is not None and training.mig.name == "3g.20gb-2x2g.10gb" and training.gpus_per_node == 8
    assert len(training.taints) == 2
    assert [t.name for t in doc.tenants] == ["team-a", "team-b"]
    assert {k: v for k, v in doc.tenants[1].hard().items() if v != "0"} == {
        "requests.nvidia.com/gpu": "2", "requests.nvidia.com/mig-3g.20gb": "2"}


def edit(path: str, value: object) -> dict:
    """The good spec with one value replaced (or removed, for value=DELETE); path like spec.nodeGroups[1].gpu."""
    doc = good()
    parts = [int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split(".")]
    target = doc
    for part in parts[:-1]:
        target = target[part]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return doc


DELETE = object()

BROKEN = [
    # (edit path, new value, expected start of the one-line error)
    ("apiVersion", "gpuctl.dev/v1", "apiVersion: unsupported 'gpuctl.dev/v1'; use gpuctl.dev/v1alpha1"),
    ("kind", "Cluster", "kind: unsupported 'Cluster'; use GpuCluster"),
    ("metadata", DELETE, "metadata: is required"),
    ("metadata.name", "Bad_Name", "metadata.name: 'Bad_Name' is not a valid name"),
    ("metadata.nam", "x", "metadata.nam: unknown key; did you mean name?"),
    ("spec.nodeGroup", [], "spec.nodeGroup: unknown key; did you mean nodeGroups?"),
    ("spec.nodeGroups", [], "spec.nodeGroups: must be a non-empty list"),
    ("spec.nodeGroups", DELETE, "spec.nodeGroups: is required"),
    ("spec.provider.cloud", "gcp", "spec.provider.cloud: unknown cloud 'gcp'"),
    ("spec.provider.clod", "sim", "spec.provider.clod: unknown key; did you mean cloud?"),
    ("spec.provider.template", "gpu-template", "spec.provider.template: not used by cloud sim"),
    ("spec.nodeGroups[0].gpu", "z100", "spec.nodeGroups[0].gpu: unknown GPU 'z100'"),
    ("spec.nodeGroups[0].nodes", 0, "spec.nodeGroups[0].nodes: must be at least 1, got 0"),
    ("spec.nodeGroups[0].nodes", "two", "spec.nodeGroups[0].nodes: must be an integer, got str 'two'"),
    ("spec.nodeGroups[0].nodes", True, "spec.nodeGroups[0].nodes: must be an integer, got bool True"),
    ("spec.nodeGroups[0].name", "GPU_1", "spec.nodeGroups[0].name: 'GPU_1' is not a valid name"),
    ("spec.nodeGroups[1].name", "inference", "spec.nodeGroups[1].name: duplicate node group 'inference'"),
    ("spec.nodeGroups[0].gpusPerNode", 17, "spec.nodeGroups[0].gpusPerNode: must be at most 16, got 17"),
    ("spec.nodeGroups[0].minNodes", 3, "spec.nodeGroups[0].minNodes: must be between 0 and nodes (2), got 3"),
    ("spec.nodeGroups[0].maxNodes", 1, "spec.nodeGroups[0].maxNodes: must be at least nodes (2), got 1"),
    ("spec.nodeGroups[0].sharing.timeSlicing", {"replica": 4},
     "spec.nodeGroups[0].sharing.timeSlicing.replica: unknown key; did you mean replicas?"),
    ("spec.nodeGroups[0].sharing.timeSlicing.replicas", 1,
     "spec.nodeGroups[0].sharing.timeSlicing.replicas: must be between 2 and 64, got 1"),
    ("spec.nodeGroups[0].sharing", {"timeSlicing": {"replicas": 4}, "mps": {"replicas": 2}},
     "spec.nodeGroups[0].sharing: set exactly one of timeSlicing, mps, mig (got 2)"),
    ("spec.nodeGroups[0].sharing", {"mig": {"layout": "all-balanced"}},
     "spec.nodeGroups[0].sharing.mig.layout: t4 does not support MIG"),
    ("spec.nodeGroups[1].sharing.mig.layout", "3g.20gb-3g.20gb-1g.5gb",
     "spec.nodeGroups[1].sharing.mig.layout: 2x3g.20gb-1g.5gb does not fit on one a100-40gb GPU: no free memory slot"),
    ("spec.nodeGroups[1].sharing.mig.layout", "2g.20gb",
     "spec.nodeGroups[1].sharing.mig.layout: unknown profile '2g.20gb' for a100-40gb"),
    ("spec.nodeGroups[1].sharing.mig", {"layuot": "all-balanced"},
     "spec.nodeGroups[1].sharing.mig.layuot: unknown key; did you mean layout?"),
    ("spec.nodeGroups[1].taints", ["nvidia.com/gpu=true:NoSchedul"], "spec.nodeGroups[1].taints[0]: "),
    ("spec.nodeGroups[1].taints", "nvidia.com/gpu=true:NoSchedule", "spec.nodeGroups[1].taints: must be a list"),
    ("spec.nodeGroups[0].labels", {"bad key!": "x"}, "spec.nodeGroups[0].labels: invalid key 'bad key!'"),
    ("spec.nodeGroups[0].labels", {"team": "a b"}, "spec.nodeGroups[0].labels.team: invalid value 'a b'"),
    ("spec.nodeGroups[0].labels", {"gpu": 4}, "spec.nodeGroups[0].labels.gpu: must be a string, got int 4"),
    ("spec.nodeGroups[0].flavor", "g2.5xlarge", "spec.nodeGroups[0].flavor: only for cloud openstack, not sim"),
    ("spec.nodeGroups[0].instanceType", "g4dn.xlarge", "spec.nodeGroups[0].instanceType: only for cloud eks, not sim"),
    ("spec.nodeGroups[0].gpuType", "t4", "spec.nodeGroups[0].gpuType: unknown key; did you mean gpu?"),
    ("spec.gpuOperator.nfd", "both", "spec.gpuOperator.nfd: unknown owner 'both'"),
    ("spec.gpuOperator.migStrategy", "mix", "spec.gpuOperator.migStrategy: unknown strategy 'mix'"),
    ("spec.gpuOperator.validate", "yes", "spec.gpuOperator.validate: must be a boolean, got str 'yes'"),
    ("spec.gpuOperator.driver", True, "spec.gpuOperator.driver: unknown key"),
    ("spec.karpenter", {"enabled": "yes"}, "spec.karpenter.enabled: must be a boolean, got str 'yes'"),
    ("spec.tenants[0].gpus", -1, "spec.tenants[0].gpus: must be at least 0, got -1"),
    ("spec.tenants[0].name", "Team A", "spec.tenants[0].name: 'Team A' is not a valid name"),
    ("spec.tenants[1].mig", {"big": 2}, "spec.tenants[1].mig: 'big' is not a MIG profile"),
    ("spec.tenants[1].name", "team-a", "spec.tenants[1].name: duplicate tenant 'team-a'"),
    ("spec.tenants[0].quota", 4, "spec.tenants[0].quota: unknown key"),
]


@pytest.mark.parametrize("path,value,expected", BROKEN, ids=[f"{p}={'(deleted)' if v is DELETE else repr(v)}"[:60] for p, v, _ in BROKEN])
def test_broken_spec_fails_with_its_field_path(path: str, value: object, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        validate(apply_defaults(parse(edit(path, value)), capabilities_of), capabilities_of)
    assert err.value.one_line().startswith(expected), err.value.one_line()


def test_karpenter_groups_may_start_empty_up_to_max_nodes() -> None:
    """0 fixed nodes is for a group Karpenter launches, and only with a maxNodes to launch up to."""
    def checked(doc: dict) -> None:
        validate(apply_defaults(parse(doc), capabilities_of), capabilities_of)

    doc = good()
    doc["spec"]["karpenter"] = {"enabled": True}
    doc["spec"]["nodeGroups"][0].update(nodes=0, maxNodes=3)
    checked(doc)
    del doc["spec"]["nodeGroups"][0]["maxNodes"]
    with pytest.raises(UsageError, match=r"^spec.nodeGroups\[0\].maxNodes: a node group of 0 nodes needs maxNodes"):
        checked(doc)
    doc["spec"]["nodeGroups"][0]["nodes"] = -1
    with pytest.raises(UsageError, match=r"nodes: must be at least 0, got -1"):
        checked(doc)
    doc["spec"]["provider"] = {"cloud": "openstack"}
    doc["spec"]["nodeGroups"][0].update(nodes=1)
    with pytest.raises(UsageError, match="spec.karpenter.enabled: Karpenter pools need cloud sim or eks, not openstack"):
        checked(doc)


def test_corpus_is_large_enough() -> None:
    assert len(BROKEN) >= 30


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: [\n")
    with pytest.raises(UsageError) as err:
        load_spec(bad)
    assert "bad.yaml at line 2: " in err.value.one_line()
