"""Node groups DRA serves one at a time (a group's `dra: true`): the spec field and its checks, the driver's values
that confine its kubelet plugin to those groups' nodes, the stack record, and which pods a moving node loses."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.specfile import export_spec, load_document, to_platform
from gpuctl.model.stack_spec import StackSpec
from gpuctl.ops.platform.dra_groups import served_the_old_way
from gpuctl.providers import capabilities_of
from gpuctl.stack.dra_driver import dra_values
from gpuctl.stack.values import operator_values, stack_from_record, stack_record
from gpuctl.util.errors import UsageError


def spec(*groups: dict[str, Any], cloud: str = "sim", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "two"},
            "spec": {"provider": {"cloud": cloud, **extra.pop("provider", {})}, "nodeGroups": list(groups), **extra}}


A = {"name": "a", "gpu": "t4", "nodes": 2, "dra": True}
B = {"name": "b", "gpu": "t4", "nodes": 2}


def test_a_groups_dra_marks_it_for_the_driver_and_leaves_the_device_plugin_on() -> None:
    doc, groups = load_document(spec(A, B), capabilities_of)
    stack = to_platform(doc, groups, ships_driver=True).stack
    assert (stack.dra, stack.dra_groups) == (False, ("a",))
    assert stack.by_dra("a") and not stack.by_dra("b") and stack.dra_driver
    assert operator_values(stack)["devicePlugin"].get("enabled") is not False  # it keeps serving group b
    values = dra_values(stack)
    assert values["kubeletPlugin"]["nodeSelector"] == {L.DRA_GROUP: "true"}
    assert "nodeSelector" not in dra_values(StackSpec(charts="upstream", dra=True))["kubeletPlugin"]


def test_every_group_in_dra_mode_is_not_a_group_list() -> None:
    doc, groups = load_document(spec(A, B, dra={"enabled": True}), capabilities_of)
    stack = to_platform(doc, groups, ships_driver=True).stack
    assert (stack.dra, stack.dra_groups) == (True, ()) and stack.by_dra("b")


def test_the_group_field_round_trips_through_export_and_the_stack_record() -> None:
    doc, groups = load_document(spec(A, B), capabilities_of)
    platform = to_platform(doc, groups, ships_driver=True)
    exported = yaml.safe_load(export_spec(platform))
    assert [g.get("dra") for g in exported["spec"]["nodeGroups"]] == [True, None]
    assert stack_from_record(stack_record(platform.stack)) == platform.stack
    old = json.loads(stack_record(platform.stack))
    del old["dra_groups"]  # a record written before the field: no group by DRA
    assert stack_from_record(json.dumps(old)).dra_groups == ()


@pytest.mark.parametrize(("document", "message"), [
    (spec({**A, "dra": "yes"}, B), "spec.nodeGroups[0].dra: must be a boolean, got str 'yes'"),
    (spec({**A, "draa": True}, B), "spec.nodeGroups[0].draa: unknown key; did you mean dra?"),
    (spec({**A, "sharing": {"timeSlicing": {"replicas": 4}}}, B),
     "spec.nodeGroups[0].sharing.timeSlicing: time-slicing through DRA is alpha"),
    (spec(A, B, cloud="eks", provider={"kubernetesVersion": "1.33", "region": "us-east-1"}),
     "spec.provider.kubernetesVersion: Kubernetes 1.33 serves no resource.k8s.io/v1"),
    (spec({**A, "nodes": 0, "maxNodes": 2}, B, karpenter={"enabled": True}, cloud="eks",
          provider={"region": "us-east-1"}), "spec.nodeGroups[0].dra: a node group moves to DRA alone only"),
])
def test_a_dra_group_that_cannot_work_is_refused_naming_its_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        load_document(document, capabilities_of)
    text = f"{err.value}; {err.value.hint}"
    assert text.startswith(message), text


def test_alpha_sharing_on_a_dra_group_is_accepted_with_the_option() -> None:
    doc, groups = load_document(spec({**A, "sharing": {"timeSlicing": {"replicas": 4}}}, B,
                                     dra={"alphaSharing": True}), capabilities_of)
    assert to_platform(doc, groups, ships_driver=True).stack.dra_groups == ("a",)


def pod(resources: dict[str, str] | None = None, claims: bool = False, extended: bool = False,
        owner: str = "ReplicaSet") -> KubeObject:
    container: dict[str, Any] = {"name": "c", "resources": {"limits": resources or {}}}
    body: dict[str, Any] = {"metadata": {"name": "p", "namespace": "n", "ownerReferences": [{"kind": owner}]},
                            "spec": {"containers": [container]}, "status": {"phase": "Running"}}
    if claims:
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-t4"}]
    if extended:
        body["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "p-extended-resources-abc",
                                                         "requestMappings": []}
    return KubeObject(body)


def test_a_moving_node_loses_only_the_pods_the_other_side_serves() -> None:
    plugin_pod, dra_pod = pod({L.GPU_RESOURCE: "1"}), pod({L.GPU_RESOURCE: "1"}, extended=True)
    claim_pod, cpu_pod = pod(claims=True), pod({"cpu": "1"})
    to_dra, to_plugin = served_the_old_way(True), served_the_old_way(False)
    assert [to_dra(p) for p in (plugin_pod, dra_pod, claim_pod, cpu_pod)] == [True, False, False, False]
    assert [to_plugin(p) for p in (plugin_pod, dra_pod, claim_pod, cpu_pod)] == [False, True, True, False]


def test_render_writes_the_driver_release_apply_installs_for_dra_groups() -> None:
    from gpuctl.ops.render import helm_releases

    doc, groups = load_document(spec(A, B), capabilities_of)
    releases = helm_releases(to_platform(doc, groups, ships_driver=True))
    assert releases["dra-driver-nvidia-gpu"].values["kubeletPlugin"]["nodeSelector"] == {L.DRA_GROUP: "true"}
    doc, groups = load_document(spec({**A, "dra": False}, B), capabilities_of)
    assert "dra-driver-nvidia-gpu" not in helm_releases(to_platform(doc, groups, ships_driver=True))


def test_render_gives_a_team_what_apply_gives_it_once_dra_serves_a_group() -> None:
    """Apply's tenant step counts claimed devices and makes claim templates wherever the driver serves a group;
    render writes the same, and nothing of it where no group is on DRA."""
    from gpuctl.ops.render import manifests

    team: dict[str, Any] = {"tenants": [{"name": "team-a", "gpus": 2}]}
    doc, groups = load_document(spec(A, B, **team), capabilities_of)
    files = manifests(to_platform(doc, groups, ships_driver=True))
    assert "23-resourceclaimtemplate-team-a-gpu-t4.yaml" in files
    hard = files["21-quota-team-a.yaml"]["spec"]["hard"]
    assert hard["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2" == hard["requests.nvidia.com/gpu"]
    doc, groups = load_document(spec({**A, "dra": False}, B, **team), capabilities_of)
    files = manifests(to_platform(doc, groups, ships_driver=True))
    assert not [f for f in files if "resourceclaimtemplate" in f]
    assert not [k for k in files["21-quota-team-a.yaml"]["spec"]["hard"] if "deviceclass" in k]
