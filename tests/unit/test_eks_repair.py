"""EKS cloud repair: the requests gpuctl sends, checked by botocore's Stubber against the installed EKS service
model (botocore validates every parameter against service-2.json). moto has no add-on API (its EKS URLs stop at
node groups and Fargate profiles: a describe_addon answers 404 "Not yet implemented") and drops nodeRepairConfig
on CreateNodegroup (it keeps it on UpdateNodegroupConfig), so these requests are held against the model here and
the whole flow against moto in tests/integration/test_eks.py, whose emulator serves the add-on calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuctl.model.catalog import get_gpu
from gpuctl.model.change import Change
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.stack_spec import StackSpec
from gpuctl.providers.eks import repair
from gpuctl.providers.eks.provider import EksProvider
from tests.unit.aws_isolation import isolate_aws

TAGS = {"gpuctl.dev/managed-by": "gpuctl"}
ADDON = {"clusterName": "prod", "addonName": "eks-node-monitoring-agent"}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    isolate_aws(monkeypatch, tmp_path)
    monkeypatch.setattr("time.sleep", lambda s: None)  # (no wait: every status is stubbed ACTIVE)


def _spec(*groups: NodeGroupSpec) -> PlatformSpec:
    return PlatformSpec("prod", "eks", tuple(GroupPlan(g) for g in groups), StackSpec("upstream"))


def _group(name: str, repair_on: bool | None, status: str = "ACTIVE") -> dict[str, Any]:
    group: dict[str, Any] = {"nodegroupName": name, "clusterName": "prod", "status": status,
                             "scalingConfig": {"minSize": 1, "maxSize": 1, "desiredSize": 1}}
    if repair_on is not None:
        group["nodeRepairConfig"] = {"enabled": repair_on}
    return group


class Stubbed:
    def __init__(self, options: CloudOptions) -> None:
        from botocore.stub import Stubber

        self.provider = EksProvider(options)
        self.stubber = Stubber(self.provider.aws.client("eks"))

    def respond(self, method: str, response: dict[str, Any], params: dict[str, Any]) -> None:
        self.stubber.add_response(method, response, params)

    def missing(self, method: str, params: dict[str, Any]) -> None:
        self.stubber.add_client_error(method, "ResourceNotFoundException", "No addon: eks-node-monitoring-agent",
                                      404, expected_params=params)


@pytest.fixture
def eks() -> Iterator[Stubbed]:
    stubbed = Stubbed(CloudOptions(region="eu-west-1"))
    with stubbed.stubber:
        yield stubbed
    stubbed.stubber.assert_no_pending_responses()


def test_the_installed_model_has_node_auto_repair(eks: Stubbed) -> None:
    assert repair.models_repair(eks.provider.aws.client("eks"))


def test_a_new_gpu_node_group_is_created_with_node_auto_repair(eks: Stubbed) -> None:
    from botocore.stub import ANY

    eks.respond("describe_cluster", {"cluster": {"name": "prod", "status": "ACTIVE",
                                                 "resourcesVpcConfig": {"subnetIds": ["subnet-a", "subnet-b"]}}},
                {"name": "prod"})
    eks.respond("create_nodegroup", {"nodegroup": _group("gpu", True, "CREATING")}, {
        "clusterName": "prod", "nodegroupName": "gpu", "scalingConfig": ANY, "instanceTypes": ["g4dn.xlarge"],
        "amiType": "AL2023_x86_64_NVIDIA", "subnets": ["subnet-a", "subnet-b"], "nodeRole": ANY, "labels": ANY,
        "taints": ANY, "tags": TAGS, "nodeRepairConfig": {"enabled": True}})
    eks.provider.options = CloudOptions(region="eu-west-1", node_role="arn:aws:iam::123456789012:role/gpu")
    eks.provider._create_nodegroup("prod", NodeGroupSpec("gpu", get_gpu("t4"), 1, 1), "g4dn.xlarge",
                                   {"minSize": 1, "maxSize": 1, "desiredSize": 1})


def test_no_node_repair_creates_the_group_without_it() -> None:
    from botocore.stub import ANY

    stubbed = Stubbed(CloudOptions(region="eu-west-1", node_role="arn:aws:iam::123456789012:role/gpu",
                                   no_node_repair=True))
    stubbed.respond("describe_cluster", {"cluster": {"name": "prod", "status": "ACTIVE",
                                                     "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}}},
                    {"name": "prod"})
    stubbed.respond("create_nodegroup", {"nodegroup": _group("gpu", None, "CREATING")}, {
        "clusterName": "prod", "nodegroupName": "gpu", "scalingConfig": ANY, "instanceTypes": ["g4dn.xlarge"],
        "amiType": "AL2023_x86_64_NVIDIA", "subnets": ["subnet-a"], "nodeRole": ANY, "labels": ANY,
        "taints": ANY, "tags": TAGS})  # the Stubber fails on any parameter more: no nodeRepairConfig
    with stubbed.stubber:
        stubbed.provider._create_nodegroup("prod", NodeGroupSpec("gpu", get_gpu("t4"), 1, 1), "g4dn.xlarge",
                                           {"minSize": 1, "maxSize": 1, "desiredSize": 1})
    stubbed.stubber.assert_no_pending_responses()
    assert stubbed.provider.cluster_steps(_spec(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1)), None) == []  # type: ignore[arg-type]


def test_plan_names_the_add_on_and_the_groups_without_repair(eks: Stubbed) -> None:
    spec = _spec(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1), NodeGroupSpec("l4", get_gpu("l4"), 1, 1),
                 NodeGroupSpec("burst", get_gpu("t4"), 0, 1, max_nodes=2))  # Karpenter's only: no node group
    [step] = eks.provider.cluster_steps(spec, None)  # type: ignore[arg-type]
    assert step.name == "enable-node-repair"
    eks.respond("describe_nodegroup", {"nodegroup": _group("gpu", None)}, {"clusterName": "prod", "nodegroupName": "gpu"})
    eks.respond("describe_nodegroup", {"nodegroup": _group("l4", True)}, {"clusterName": "prod", "nodegroupName": "l4"})
    eks.missing("describe_addon", ADDON)
    observed = step.observe()
    assert (observed.action, observed.detail) == (
        Change.CREATED, "install add-on eks-node-monitoring-agent; node auto repair on for gpu")


def test_apply_installs_the_add_on_tagged_and_turns_repair_on_where_off(eks: Stubbed) -> None:
    [step] = eks.provider.cluster_steps(_spec(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1)), None)  # type: ignore[arg-type]
    eks.respond("describe_nodegroup", {"nodegroup": _group("gpu", False)}, {"clusterName": "prod", "nodegroupName": "gpu"})
    eks.missing("describe_addon", ADDON)
    eks.respond("create_addon", {"addon": {"addonName": "eks-node-monitoring-agent", "status": "CREATING"}},
                {**ADDON, "tags": TAGS})
    eks.respond("update_nodegroup_config", {"update": {"id": "u1", "status": "InProgress"}},
                {"clusterName": "prod", "nodegroupName": "gpu", "nodeRepairConfig": {"enabled": True}})
    eks.respond("describe_nodegroup", {"nodegroup": _group("gpu", True)}, {"clusterName": "prod", "nodegroupName": "gpu"})
    assert step.act() is Change.CREATED


def test_an_add_on_already_there_is_adopted_and_a_converged_cluster_is_left_alone(eks: Stubbed) -> None:
    [step] = eks.provider.cluster_steps(_spec(NodeGroupSpec("gpu", get_gpu("t4"), 1, 1)), None)  # type: ignore[arg-type]
    foreign = {"addon": {"addonName": "eks-node-monitoring-agent", "clusterName": "prod", "status": "ACTIVE",
                         "tags": {"owner": "platform-team"}}}
    for _ in range(2):  # plan, then apply: no write either time (the Stubber fails on any call not queued)
        eks.respond("describe_nodegroup", {"nodegroup": _group("gpu", True)},
                    {"clusterName": "prod", "nodegroupName": "gpu"})
        eks.respond("describe_addon", foreign, ADDON)
    assert step.observe().action is Change.NO_CHANGE
    assert step.act() is Change.NO_CHANGE


def test_only_the_add_on_gpuctl_installed_is_deleted(eks: Stubbed) -> None:
    client = eks.provider.aws.client("eks")
    eks.respond("describe_addon", {"addon": {"addonName": "eks-node-monitoring-agent", "tags": {"team": "x"}}}, ADDON)
    assert repair.delete_own_addon(client, "prod") is False
    eks.respond("describe_addon", {"addon": {"addonName": "eks-node-monitoring-agent", "tags": TAGS}}, ADDON)
    eks.respond("delete_addon", {"addon": {"addonName": "eks-node-monitoring-agent", "status": "DELETING"}}, ADDON)
    assert repair.delete_own_addon(client, "prod") is True
    eks.missing("describe_addon", ADDON)
    assert repair.delete_own_addon(client, "prod") is False
