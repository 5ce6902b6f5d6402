"""The GPU tolerations policy as gpuctl writes it (ops/tenancy/tolerations.py); the API server's behaviour with it
is tests/integration/test_workload_admission.py's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpuctl.model.catalog import GPUS
from gpuctl.model.change import Change
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint
from gpuctl.ops.tenancy import tolerations as T

TRAINING = Taint("dedicated", "training", "NoSchedule")


def group(name: str, gpu: str, *taints: Taint, labels: dict[str, str] | None = None) -> GroupPlan:
    return GroupPlan(NodeGroupSpec(name, GPUS[gpu], 1, 1, taints=taints or DEFAULT_GPU_TAINTS), labels=labels or {})


def test_one_entry_per_toleration_with_the_offers_of_every_group_that_has_the_taint() -> None:
    found = T.entries([group("training", "a100-40gb", *DEFAULT_GPU_TAINTS, TRAINING),
                       group("inference", "t4", labels={"workload": "inference"})])
    assert [e["toleration"] for e in found] == [
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    gpu = found[1]["offers"]
    assert [o["labels"]["gpuctl.dev/nodegroup"] for o in gpu] == ["inference", "training"]
    assert gpu[0]["resources"] == ["nvidia.com/gpu"] and gpu[0]["labels"]["workload"] == "inference"
    assert gpu[1]["labels"]["workload"] is None  # a pod selecting workload=inference is not the training group's
    assert {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-7g.40gb"} \
        <= set(gpu[1]["resources"])  # every profile of the model: `mig apply` may give the group any
    assert all(o["claims"] for e in found for o in e["offers"])


def test_a_taint_without_value_is_tolerated_with_exists_and_an_empty_value() -> None:
    [entry] = T.entries([group("g", "t4", Taint("gpu-only", "", "NoExecute"))])
    assert entry["toleration"] == {"key": "gpu-only", "operator": "Exists", "value": "", "effect": "NoExecute"}


def test_cel_literals_wrap_every_element_of_an_aggregate_in_dyn() -> None:
    literal = T.cel_literal([{"a": ["x"], "b": True, "c": {"k": 'v"'}}])
    assert literal == '[dyn({"a": dyn([dyn("x")]), "b": dyn(true), "c": dyn({"k": dyn("v\\"")})})]'
    assert T.cel_literal([]) == "[]"


def test_the_policy_carries_the_groups_and_is_labelled_as_gpuctls() -> None:
    policy, binding = T.policy_manifests([group("g", "t4")])
    assert policy["kind"] == "MutatingAdmissionPolicy" and binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert all(d["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"} for d in (policy, binding))
    [groups] = [v for v in policy["spec"]["variables"] if v["name"] == "groups"]
    assert '"nvidia.com/gpu"' in groups["expression"] and groups["expression"].startswith("[dyn(")
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == "gpuctl.dev/tenant"


def test_where_the_api_is_not_served_the_team_is_told_once_what_to_add(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(T, "served", lambda client: False)
    monkeypatch.setattr(T, "ensure_tolerations", lambda *a: pytest.fail("no write where it is not served"))
    monkeypatch.setattr(T, "_TOLD", set())
    client: Any = SimpleNamespace(server="https://old.example:6443")
    groups = (group("g", "a100-40gb", *DEFAULT_GPU_TAINTS, TRAINING),)
    for namespace in ("team-a", "team-b"):
        assert T.converge_tolerations(client, groups, namespace) is Change.NO_CHANGE
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "MutatingAdmissionPolicy" in err
    assert '{"key":"nvidia.com/gpu","operator":"Equal","value":"true","effect":"NoSchedule"}' in err
    assert '"key":"dedicated"' in err
