"""The GPU fence's manifests (the behaviour is tested against the real API server in
tests/integration/test_tenant_fence.py)."""

from __future__ import annotations

from gpuctl.model.tenant import TENANT_LABEL
from gpuctl.ops.tenancy.fence import NAME, fence_manifests


def test_the_binding_enforces_the_policy_in_tenant_namespaces_only() -> None:
    policy, binding = fence_manifests()
    assert (policy["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == binding["spec"]["policyName"] == NAME
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}
    assert all(doc["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl"} for doc in (policy, binding))


def test_every_rule_says_how_to_request_a_gpu() -> None:
    policy, _ = fence_manifests()
    rules = policy["spec"]["validations"]
    assert [r["message"].split("(rule ")[1].split(")")[0] for r in rules] == [
        "device-env", "runtime-class", "cdi-annotation", "privileged", "host-devices"]
    assert all("resources.limits" in r["message"] and r["reason"] == "Forbidden" for r in rules)
