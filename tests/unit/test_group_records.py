"""Node-group records (gpuctl/ops/group_records.py) and how cluster-wide settings follow every recorded group."""

from __future__ import annotations

import pytest

from gpuctl.api import load_document, to_platform
from gpuctl.model.spec import GroupPlan
from gpuctl.ops.group_records import intended_labels, node_drift, plan_of, record_of, with_cluster_groups
from gpuctl.ops.validation_record import spec_digest
from gpuctl.util.errors import UsageError


def platform(*groups: dict, strategy: str | None = None):
    operator = {"migStrategy": strategy} if strategy else {}
    doc, valid = load_document({"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "p"},
                                "spec": {"provider": {"cloud": "sim"}, "nodeGroups": list(groups),
                                         "gpuOperator": operator}})
    return to_platform(doc, valid)


SHARED = {"name": "shared", "gpu": "t4", "nodes": 2, "sharing": {"timeSlicing": {"replicas": 4}},
          "labels": {"workload": "inference"}}
TRAINING = {"name": "training", "gpu": "a100-40gb", "nodes": 1, "sharing": {"mig": {"layout": "3g.20gb-2x2g.10gb"}},
            "taints": ["nvidia.com/gpu=true:NoSchedule", "dedicated=training:NoSchedule"]}
MPS = {"name": "mps", "gpu": "t4", "nodes": 1, "sharing": {"mps": {"replicas": 4}}}


def test_a_record_reads_back_as_the_group_it_records() -> None:
    groups = platform(SHARED, TRAINING).groups
    assert [g.spec.name for g in groups] == ["shared", "training"]
    for group in groups:
        back = plan_of(group.spec.name, record_of(group))
        assert back is not None
        assert (back.sharing, back.mig, back.labels, back.spec.taints, back.spec.gpu) == \
            (group.sharing, group.mig, group.labels, group.spec.taints, group.spec.gpu)
    assert plan_of("x", "{not json") is None and plan_of("x", '{"gpu": "no-such-gpu"}') is None


def test_a_command_about_one_group_keeps_the_others_cluster_wide_settings() -> None:
    full = platform(SHARED, TRAINING)
    recorded = {g.spec.name: plan_of(g.spec.name, record_of(g)) for g in full.groups}
    alone = platform({"name": "shared", "gpu": "t4", "nodes": 2})  # no sharing, default taint only
    widened = with_cluster_groups(alone, recorded, full.stack)  # type: ignore[arg-type]
    assert [g.spec.name for g in widened.others] == ["training"]
    assert set(widened.stack.taints) == set(full.stack.taints)  # dedicated=training still tolerated
    assert widened.stack.shares_gpus is False  # the named group no longer shares; training has MIG only
    assert with_cluster_groups(platform(SHARED), recorded, None).stack.shares_gpus  # type: ignore[arg-type]


def test_a_spec_without_a_group_dra_serves_keeps_dra_serving_it() -> None:
    """A spec file naming only some groups leaves the others as they are: DRA keeps serving a group it serves
    (and its driver stays), rather than the driver going with the spec's groups' marks."""
    plain = {k: v for k, v in TRAINING.items() if k != "sharing"}
    full = platform({"name": "shared", "gpu": "t4", "nodes": 2}, {**plain, "dra": True})
    assert full.stack.dra_groups == ("training",)
    recorded = {g.spec.name: plan_of(g.spec.name, record_of(g)) for g in full.groups}
    alone = with_cluster_groups(platform({"name": "shared", "gpu": "t4", "nodes": 2}), recorded, full.stack)  # type: ignore[arg-type]
    assert alone.stack.dra_groups == ("training",) and alone.stack.dra_driver
    assert not alone.stack.by_dra("shared")
    assert with_cluster_groups(platform(SHARED), recorded, None).stack.dra_groups == ()  # type: ignore[arg-type]


def test_no_mig_strategy_fits_every_group_is_refused() -> None:
    recorded = {g.spec.name: g for g in platform(TRAINING).groups}
    with pytest.raises(UsageError, match="migStrategy"):
        with_cluster_groups(platform(MPS), recorded, None)


def test_a_node_without_its_groups_sharing_drifts() -> None:
    group = platform(SHARED).groups[0]
    good = {**{k: v for k, v in intended_labels(group).items() if v is not None}}
    taints = {("nvidia.com/gpu", "true", "NoSchedule")}
    assert node_drift("n", good, taints, group) == []
    drift = node_drift("n", {"workload": "inference"}, set(), group)
    assert any("slice-4" in d for d in drift) and any("taint" in d for d in drift)


def test_the_validated_digest_follows_the_spec() -> None:
    assert spec_digest(platform(SHARED)) == spec_digest(platform(SHARED))
    assert spec_digest(platform(SHARED)) != spec_digest(platform(SHARED, TRAINING))


def test_a_rerun_keeps_what_its_command_line_left_unsaid_and_a_spec_file_stays_exact() -> None:
    from dataclasses import replace

    from gpuctl.model.spec import UNSTATED
    from gpuctl.ops.group_records import with_recorded

    made = platform({**SHARED, "sharing": {"mps": {"replicas": 4}},
                     "taints": ["nvidia.com/gpu=true:NoSchedule", "pool=shared:NoSchedule"]})
    recorded: dict[str, GroupPlan] = {}
    for g in made.groups:
        plan = plan_of(g.spec.name, record_of(g))
        assert plan is not None, g.spec.name
        recorded[g.spec.name] = plan
    rerun = platform({"name": "shared", "gpu": "t4", "nodes": 2})  # the quick start's flags: no label, no sharing
    kept = with_recorded(replace(rerun, unstated=frozenset(UNSTATED)), recorded, made.stack.mig_strategy)
    [group] = kept.groups
    assert group.labels == {"workload": "inference"}
    assert (group.sharing.strategy, group.sharing.replicas) == ("mps", 4)
    assert [str(t) for t in group.spec.taints] == ["nvidia.com/gpu=true:NoSchedule", "pool=shared:NoSchedule"]
    assert kept.stack.shares_gpus and kept.stack.mig_strategy == "single"  # MPS needs the single strategy
    assert kept.stack.taints == made.stack.taints
    # a field the command line states is its own: --label replaces the labels, the rest is kept
    relabelled = with_recorded(replace(platform({**rerun_group(), "labels": {"team": "a"}}),
                                       unstated=frozenset(UNSTATED) - {"labels"}), recorded, "single")
    assert relabelled.groups[0].labels == {"team": "a"} and relabelled.groups[0].sharing.replicas == 4
    # a spec file (nothing unstated) is exact: it empties the labels and unshares the group
    assert with_recorded(rerun, recorded, "single") == rerun


def rerun_group() -> dict:
    return {"name": "shared", "gpu": "t4", "nodes": 2}
