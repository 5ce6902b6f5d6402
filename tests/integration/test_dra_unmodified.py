"""Unmodified pods in DRA mode (issue 32): on one sim cluster made by `apply -f` with `dra: {enabled: true}`, an
A100 group with the MIG layout 3g.20gb-2x2g.10gb and a group of full A100s, the four manifests of
docs/workloads.md and a pod asking for `nvidia.com/mig-3g.20gb: 1`, as written, run in a tenant namespace on
devices the real kube-scheduler allocates from the DRA driver's slices through the ResourceClaim it makes for a
pod's extended resources (KEP-5004): full GPUs through the chart's DeviceClass gpu.nvidia.com, MIG devices
through gpuctl's mig-3g.20gb.gpuctl.dev. The API server's ResourceQuota refuses a pod beyond the team's quota,
Kueue charges a Job's MIG profile to the team's queue, the fence still refuses a bypass, and status/top/validate
count the devices. The team's MIG template claims from the same class, so one quota of the profile caps both
ways together: the API server refuses whichever comes second."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.conftest import spec_cluster
from tests.integration.test_workload_admission import documented_workloads, kubectl_apply

pytestmark = pytest.mark.integration
CLUSTER = "draplain"
TEAM = "team-u"
SPEC = f"""apiVersion: gpuctl.dev/v1alpha1
kind: GpuCluster
metadata: {{name: {CLUSTER}}}
spec:
  provider: {{cloud: sim}}
  nodeGroups:
    - {{name: full, gpu: a100-40gb, nodes: 1, gpusPerNode: 4}}
    - {{name: migs, gpu: a100-40gb, nodes: 1, gpusPerNode: 1, sharing: {{mig: {{layout: 3g.20gb-2x2g.10gb}}}}}}
  dra: {{enabled: true}}
  kueue: {{enabled: true}}
  gpuOperator: {{validate: false}}
  tenants:
    - {{name: {TEAM}, gpus: 4, mig: {{3g.20gb: 1}}}}
"""
EXTENDED = "resource.kubernetes.io/extended-resource-claim"  # k8s.io/api resource/v1 ExtendedResourceClaimAnnotation
MIG_CLASS = "mig-3g.20gb.gpuctl.dev"


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with spec_cluster(sim_env, tmp_path_factory, CLUSTER, SPEC) as (env, spec, first):
        yield {"env": env, "spec": spec, "first": first}


def client(env: dict[str, str]) -> Any:
    from kubernetes import config

    return config.new_client_from_config(env["KUBECONFIG"])


def until(what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.3)
    return found


def claims(env: dict[str, str], namespace: str) -> list[dict[str, Any]]:
    from kubernetes.client import ResourceV1Api

    data = ResourceV1Api(client(env)).list_namespaced_resource_claim(namespace, _preload_content=False).data
    return json.loads(data)["items"]


def device_class(env: dict[str, str], name: str) -> dict[str, Any]:
    from kubernetes.client import ResourceV1Api

    return json.loads(ResourceV1Api(client(env)).read_device_class(name, _preload_content=False).data)


def mig_pod(name: str, count: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "cuda", "image": "nvidia/cuda:12.8.0-base-ubuntu24.04",
                                     "command": ["nvidia-smi", "-L"],
                                     "resources": {"limits": {"nvidia.com/mig-3g.20gb": count}}}]}}


def extended_claim(env: dict[str, str], pod: dict[str, Any]) -> dict[str, Any] | None:
    """The scheduler's claim for `pod`'s extended resources, once allocated and reserved for it."""
    for claim in claims(env, TEAM):
        owners = claim["metadata"].get("ownerReferences") or []
        status = claim.get("status") or {}
        if (claim["metadata"].get("annotations") or {}).get(EXTENDED) == "true" and \
                any(o["uid"] == pod["metadata"]["uid"] for o in owners) and status.get("allocation") and \
                any(r.get("uid") == pod["metadata"]["uid"] for r in status.get("reservedFor") or []):
            return claim
    return None


def pods(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    from kubernetes.client import CoreV1Api

    data = CoreV1Api(client(env)).list_namespaced_pod(TEAM, _preload_content=False).data
    return {p["metadata"]["name"]: p for p in json.loads(data)["items"]}


def slice_device(env: dict[str, str], node: str, device: str) -> dict[str, Any]:
    from kubernetes.client import ResourceV1Api

    data = json.loads(ResourceV1Api(client(env)).list_resource_slice(_preload_content=False).data)["items"]
    return next(d for s in data if s["spec"].get("nodeName") == node and s["spec"]["driver"] == "gpu.nvidia.com"
                for d in s["spec"].get("devices") or [] if d["name"] == device)


def test_gpuctl_makes_a_device_class_per_mig_profile_of_the_model(cluster: dict[str, Any]) -> None:
    steps = {s["step"]: s["outcome"] for s in cluster["first"]["steps"]}
    assert steps["apply-mig-device-classes"] == "created"
    made = device_class(cluster["env"], MIG_CLASS)
    assert made["spec"]["extendedResourceName"] == "nvidia.com/mig-3g.20gb"
    assert made["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuctl"
    assert "profile == '3g.20gb'" in made["spec"]["selectors"][0]["cel"]["expression"]
    me = device_class(cluster["env"], "mig-1g.5gb.me.gpuctl.dev")  # +me: the device plugin's spelling
    assert me["spec"]["extendedResourceName"] == "nvidia.com/mig-1g.5gb.me"
    assert "profile == '1g.5gb+me'" in me["spec"]["selectors"][0]["cel"]["expression"]
    with pytest.raises(Exception, match="Not Found|404"):
        device_class(cluster["env"], "mig-1g.6gb.gpuctl.dev")  # an A30's profile: no A30 here


def test_the_four_workloads_and_a_mig_pod_run_on_dra_devices(cluster: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api

    env = cluster["env"]
    workloads = documented_workloads()
    assert [yaml.safe_load(w)["kind"] for w in workloads] == ["Deployment", "Job", "StatefulSet", "Pod"]
    for text in workloads:
        kubectl_apply(env, text, TEAM)
    CoreV1Api(client(env)).create_namespaced_pod(TEAM, mig_pod("mig-pod"))
    running = ("gpu-deployment-", "my-notebook-0", "raycluster-gpu-worker-", "mig-pod")

    def placed() -> dict[str, tuple[dict[str, Any], dict[str, Any]]] | None:
        found = {}
        for prefix in running:
            for name, pod in pods(env).items():
                if name.startswith(prefix) and pod["spec"].get("nodeName") and (c := extended_claim(env, pod)):
                    found[prefix] = (pod, c)
        return found if len(found) == len(running) else None

    claimed = until("every pod scheduled on a claimed device", placed)
    assert sorted(claimed) == sorted(running)
    for prefix, (pod, claim) in claimed.items():
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == "gpu.nvidia.com" and result["pool"] == pod["spec"]["nodeName"], prefix
        assert pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == claim["metadata"]["name"]
        device = slice_device(env, result["pool"], result["device"])
        if prefix == "mig-pod":
            assert (request["deviceClassName"], request["count"]) == (MIG_CLASS, 1)
            assert device["attributes"]["profile"]["string"] == "3g.20gb"
        else:
            assert (request["deviceClassName"], request["count"]) == ("gpu.nvidia.com", 1), prefix
            assert device["attributes"]["type"]["string"] == "gpu", prefix
    # The Job's pod completes (kwok), and the resourceclaim controller deletes the claim the scheduler made for it
    # (pkg/controller/resourceclaim/controller.go: an unreserved generated claim of a pod that is done).
    job = until("the Job's pod done", lambda: next((p for n, p in pods(env).items() if n.startswith("gpu-job-")
                                                    and p["status"].get("phase") == "Succeeded"), None))
    name = job["status"]["extendedResourceClaimStatus"]["resourceClaimName"]  # set by the scheduler at PreBind
    assert job["spec"]["nodeName"].startswith("full-")
    until("the Job's claim deleted", lambda: name not in {c["metadata"]["name"] for c in claims(env, TEAM)})


def test_the_quota_refuses_a_mig_pod_beyond_it(cluster: dict[str, Any]) -> None:
    """The pod evaluator charges `requests.nvidia.com/mig-3g.20gb` (k8s.io/kubernetes v1.37.2 pkg/quota/v1/
    evaluator/core/pods.go podComputeUsageHelper); the scheduler's claim then charges only its class's devices
    (resource_claims.go addExtendedResourceQuota: less what the owning pod counts), so one key caps both."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    env = cluster["env"]
    until("the MIG pod on its device", lambda: (p := pods(env).get("mig-pod")) and extended_claim(env, p))
    with pytest.raises(ApiException) as refused:
        CoreV1Api(client(env)).create_namespaced_pod(TEAM, mig_pod("one-too-many"))
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)
    assert "requests.nvidia.com/mig-3g.20gb=1" in str(refused.value.body)
    used = CoreV1Api(client(env)).read_namespaced_resource_quota("gpuctl-gpu-quota", TEAM).status.used
    assert used["requests.nvidia.com/mig-3g.20gb"] == "1"
    assert used["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "3"  # the three running workloads' claims
    # What each key is charged, read from a quota naming them all (the quota controller counts what exists):
    # the pod's extended resource once, and the claim's class devices besides.
    keys = ["requests.nvidia.com/mig-3g.20gb", f"{MIG_CLASS}.deviceclass.resource.k8s.io/devices",
            f"requests.deviceclass.resource.kubernetes.io/{MIG_CLASS}", "requests.nvidia.com/gpu",
            "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"]
    CoreV1Api(client(env)).create_namespaced_resource_quota(TEAM, {
        "metadata": {"name": "charges"}, "spec": {"hard": dict.fromkeys(keys, "100")}})

    def charged() -> dict[str, str] | None:
        status = CoreV1Api(client(env)).read_namespaced_resource_quota("charges", TEAM).status
        return status.used if status and status.used and set(keys) <= set(status.used) else None

    assert {k: v for k, v in until("the charges counted", charged).items() if k in keys} == {
        "requests.nvidia.com/mig-3g.20gb": "1", f"{MIG_CLASS}.deviceclass.resource.k8s.io/devices": "1",
        f"requests.deviceclass.resource.kubernetes.io/{MIG_CLASS}": "1", "requests.nvidia.com/gpu": "3",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "3"}
    CoreV1Api(client(env)).delete_namespaced_resource_quota("charges", TEAM)


def workload_of(env: dict[str, str], job: str) -> dict[str, Any] | None:
    from kubernetes.client import CustomObjectsApi

    found = CustomObjectsApi(client(env)).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TEAM, "workloads")
    return next((w for w in found["items"] if any(o["name"] == job for o in w["metadata"].get("ownerReferences") or [])),
                None)


def quota_reserved(env: dict[str, str], job: str) -> dict[str, Any] | None:
    """The Workload's QuotaReserved condition, once Kueue has decided (either way)."""
    workload = workload_of(env, job)
    conditions = {c["type"]: c for c in ((workload or {}).get("status") or {}).get("conditions") or []}
    reserved = conditions.get("QuotaReserved")
    return reserved if reserved and (reserved["status"] == "True" or reserved.get("message")) else None


def test_kueue_charges_a_jobs_mig_profile_to_the_teams_queue(cluster: dict[str, Any]) -> None:
    """A Job asking for nvidia.com/mig-3g.20gb: Kueue charges it under that name (gpuctl's class is mapped to it:
    kueue v0.19.2 pkg/dra/extended_resources.go resolveQuotaKey), which the team's DRA queue covers with its
    quota of the profile (1): a second such Job is not admitted, nor one claiming by the team's template, and
    in the other order likewise. (Kueue admits by its own count; the pods of the
    first then meet the ResourceQuota, which mig-pod already fills.)"""
    from kubernetes.client import BatchV1Api, CustomObjectsApi

    env = cluster["env"]
    queue = CustomObjectsApi(client(env)).get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", TEAM)
    assert "nvidia.com/mig-3g.20gb" in queue["spec"]["resourceGroups"][0]["coveredResources"]
    for name in ("mig-job-1", "mig-job-2"):
        body = mig_pod(name)
        BatchV1Api(client(env)).create_namespaced_job(TEAM, {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", **body["spec"]}}}})
        reserved = until(f"Kueue's decision on {name}", partial(quota_reserved, env, name))
        if name == "mig-job-1":
            assert reserved["status"] == "True", reserved
            workload = workload_of(env, name) or {}
            usage = workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
            assert usage["nvidia.com/mig-3g.20gb"] in ("1", 1), usage
        else:
            assert reserved["status"] == "False", reserved
            assert "nvidia.com/mig-3g.20gb" in reserved["message"], reserved
    # A Job whose pods claim by the team's template mig-3g.20gb: its class, gpuctl's, is mapped to the same
    # nvidia.com/mig-3g.20gb (model/dra.py device_class_mappings; unmapped, Kueue would never admit it), so
    # mig-job-1 leaves it no quota either
    submit_job(env, "tmpl-job-1", template_pod("tmpl-job-1"))
    reserved = until("Kueue's decision on tmpl-job-1", partial(quota_reserved, env, "tmpl-job-1"))
    assert reserved["status"] == "False" and "nvidia.com/mig-3g.20gb" in reserved["message"], reserved
    assert "not mapped" not in reserved["message"], reserved
    for name in ("mig-job-1", "mig-job-2", "tmpl-job-1"):
        BatchV1Api(client(env)).delete_namespaced_job(name, TEAM, propagation_policy="Background")
    until("their Workloads gone", lambda: all(workload_of(env, n) is None for n in ("mig-job-1", "mig-job-2",
                                                                                      "tmpl-job-1")))
    # the other order: the template's Job admitted, charged the profile, and a Job asking for it refused
    submit_job(env, "tmpl-job-2", template_pod("tmpl-job-2"))
    reserved = until("Kueue's decision on tmpl-job-2", partial(quota_reserved, env, "tmpl-job-2"))
    assert reserved["status"] == "True", reserved
    usage = (workload_of(env, "tmpl-job-2") or {})["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    assert usage.get("nvidia.com/mig-3g.20gb") in ("1", 1), usage
    submit_job(env, "mig-job-3", mig_pod("mig-job-3"))
    reserved = until("Kueue's decision on mig-job-3", partial(quota_reserved, env, "mig-job-3"))
    assert reserved["status"] == "False" and "nvidia.com/mig-3g.20gb" in reserved["message"], reserved
    for name in ("tmpl-job-2", "mig-job-3"):
        BatchV1Api(client(env)).delete_namespaced_job(name, TEAM, propagation_policy="Background")


def submit_job(env: dict[str, str], name: str, pod: dict[str, Any]) -> None:
    from kubernetes.client import BatchV1Api

    BatchV1Api(client(env)).create_namespaced_job(TEAM, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", **pod["spec"]}}}})


def test_the_fence_still_refuses_a_bypass_of_a_mig_pod(cluster: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    body = mig_pod("bypass")
    body["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as refused:
        CoreV1Api(client(cluster["env"])).create_namespaced_pod(TEAM, body, dry_run="All")
    assert refused.value.status == 403 and "gpuctl GPU fence (rule privileged)" in str(refused.value.body)


def test_the_mig_pod_got_the_gpu_nodes_tolerations_as_written(cluster: dict[str, Any]) -> None:
    """It was created without tolerations (mig_pod): the tolerations policy gave them, as for a full-GPU pod."""
    pod = pods(cluster["env"])["mig-pod"]
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in \
        pod["spec"]["tolerations"]
    assert "tolerations" not in mig_pod("mig-pod")["spec"]


def gpu_pod(name: str) -> dict[str, Any]:
    body = mig_pod(name)
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return body


def test_status_top_and_validate_count_them(cluster: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api

    env = cluster["env"]
    until("every pod on a claimed device", lambda: len([p for p in pods(env).values() if extended_claim(env, p)]) == 4)
    proc = run_gpuctl("-o", "json", "status", env=env)
    assert proc.returncode == 0, proc.stderr
    nodes = {n["node"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert [(nodes[n]["devices"], nodes[n]["allocated"], nodes[n]["free"]) for n in ("full-0", "migs-0")] == [
        (4, 3, 1), (3, 1, 2)]  # 4 GPUs, 3 held by the workloads; 3g.20gb + 2 x 2g.10gb, the 3g.20gb held
    proc = run_gpuctl("-o", "json", "top", env=env)
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    team = next(t for t in view["tenants"] if t["tenant"] == TEAM)
    assert (team["used"]["nvidia.com/gpu"], team["used"]["nvidia.com/mig-3g.20gb"]) == (3, 1), team
    held = sorted(p for g in view["gpus"] for p in g["pods"] if p.startswith(f"{TEAM}/"))
    assert len(held) == 4 and f"{TEAM}/mig-pod" in held, json.dumps(view["gpus"])
    proc = run_gpuctl("validate", "--nodegroup", "migs", env=env)  # a 2g.10gb device is free for its smoke test
    assert proc.returncode == 0, proc.stderr
    # The last free GPU taken by an unmodified pod: validate's smoke test finds none free (exit 6)
    CoreV1Api(client(env)).create_namespaced_pod(TEAM, gpu_pod("fourth"))
    until("the fourth pod on a claimed device", lambda: (p := pods(env).get("fourth")) and extended_claim(env, p))
    proc = run_gpuctl("validate", "--nodegroup", "full", "--timeout", "5", env=env)
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr and "smoke-test" in proc.stderr
    CoreV1Api(client(env)).delete_namespaced_pod("fourth", TEAM, grace_period_seconds=0)


def test_a_second_apply_changes_no_class(cluster: dict[str, Any]) -> None:
    proc = run_gpuctl("-o", "json", "plan", "-f", str(cluster["spec"]), env=cluster["env"])
    assert proc.returncode == 0, proc.stderr
    steps = {s["step"]: s for s in json.loads(proc.stdout)}
    assert steps["apply-mig-device-classes"]["action"] == "no change", steps["apply-mig-device-classes"]


def test_without_gpuctls_class_a_mig_pod_stays_pending_until_apply_makes_it_again(cluster: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api, ResourceV1Api

    env = cluster["env"]
    CoreV1Api(client(env)).delete_namespaced_pod("mig-pod", TEAM, grace_period_seconds=0)
    until("the MIG pod gone", lambda: "mig-pod" not in pods(env))
    ResourceV1Api(client(env)).delete_device_class(MIG_CLASS)
    CoreV1Api(client(env)).create_namespaced_pod(TEAM, mig_pod("mig-again"))

    def unschedulable() -> dict[str, Any] | None:
        conditions = {c["type"]: c for c in pods(env)["mig-again"]["status"].get("conditions") or []}
        scheduled = conditions.get("PodScheduled") or {}
        return scheduled if scheduled.get("reason") == "Unschedulable" else None

    assert "nvidia.com/mig-3g.20gb" in until("the scheduler's refusal", unschedulable)["message"]
    proc = run_gpuctl("-o", "json", "apply", "-f", str(cluster["spec"]), env=env)
    assert proc.returncode == 0, proc.stderr
    steps = {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}
    assert steps["apply-mig-device-classes"] == "created"
    claim = until("the pod on a claimed MIG device", lambda: extended_claim(env, pods(env)["mig-again"]))
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == MIG_CLASS


def template_pod(name: str) -> dict[str, Any]:
    """A pod claiming a MIG device through the team's ResourceClaimTemplate mig-3g.20gb (tenant_claims.py)."""
    body = mig_pod(name)
    body["spec"]["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": "mig-3g.20gb"}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "mig"}]}
    return body


def claim_refusal(env: dict[str, str], pod: str) -> str | None:
    """The resourceclaim controller's event on `pod` when the API server refuses the claim it makes from the
    pod's template (k8s.io/kubernetes v1.37.2 pkg/controller/resourceclaim/controller.go syncPod)."""
    from kubernetes.client import CoreV1Api

    events = CoreV1Api(client(env)).list_namespaced_event(TEAM, field_selector=f"involvedObject.name={pod}").items
    return next((e.message for e in events if e.reason == "FailedResourceClaimCreation"), None)


def quota_used(env: dict[str, str]) -> dict[str, str]:
    from kubernetes.client import CoreV1Api

    status = CoreV1Api(client(env)).read_namespaced_resource_quota("gpuctl-gpu-quota", TEAM).status
    return dict((status.used if status else None) or {})


def test_one_quota_of_the_profile_caps_template_claims_and_unmodified_pods_together(cluster: dict[str, Any]) -> None:
    """The team's mig-3g.20gb template claims from gpuctl's class of the profile, the class the scheduler claims
    from for an unmodified pod; the API server's quota charges a claim of it the class's devices and, as the
    class names nvidia.com/mig-3g.20gb, `requests.nvidia.com/mig-3g.20gb` (k8s.io/kubernetes v1.37.2
    pkg/quota/v1/evaluator/core/resource_claims.go Usage, addExtendedResourceQuota). With a quota of 1, whichever
    way comes first, the other is refused by the API server: the template's claim when an unmodified pod holds
    the profile, an unmodified pod when a template's claim does. (Before, the template claimed from the driver's
    mig.nvidia.com, charged to a key of its own: the team had its MIG quota twice.)"""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    env = cluster["env"]
    api = CoreV1Api(client(env))
    devices = f"{MIG_CLASS}.deviceclass.resource.k8s.io/devices"
    hard = api.read_namespaced_resource_quota("gpuctl-gpu-quota", TEAM).spec.hard
    assert (hard[devices], hard["requests.nvidia.com/mig-3g.20gb"]) == ("1", "1")
    assert hard["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "0"
    [request] = (until("the template", lambda: next((t for t in templates(env) if t["metadata"]["name"]
                                                      == "mig-3g.20gb"), None))["spec"]["spec"]["devices"]["requests"])
    assert request["exactly"]["deviceClassName"] == MIG_CLASS and "selectors" not in request["exactly"]

    # An unmodified pod holds the profile (mig-again, from the test before): the template's claim is refused.
    until("the unmodified pod on its device", lambda: (p := pods(env).get("mig-again")) and extended_claim(env, p))
    until("its charge counted", lambda: quota_used(env).get(devices) == "1")
    api.create_namespaced_pod(TEAM, template_pod("by-template"))
    message = until("the API server's refusal of the template's claim", partial(claim_refusal, env, "by-template"))
    assert "exceeded quota: gpuctl-gpu-quota" in message, message
    assert f"{devices}=1" in message and "requests.nvidia.com/mig-3g.20gb=1" in message, message
    assert not [c for c in claims(env, TEAM) if (c["metadata"].get("annotations") or {}).get(EXTENDED) != "true"]

    # The other order: both pods gone, a template's claim holds the profile, an unmodified pod is refused.
    for name in ("mig-again", "by-template"):
        api.delete_namespaced_pod(name, TEAM, grace_period_seconds=0)
    until("both pods gone", lambda: not {"mig-again", "by-template"} & set(pods(env)))
    until("the quota free", lambda: quota_used(env).get(devices) == "0"
          and quota_used(env).get("requests.nvidia.com/mig-3g.20gb") == "0")
    api.create_namespaced_pod(TEAM, template_pod("by-template-2"))

    def allocated() -> dict[str, Any] | None:
        pod = pods(env).get("by-template-2") or {}
        return next((c for c in claims(env, TEAM) if any(o.get("uid") == pod["metadata"]["uid"] for o in
                                                          c["metadata"].get("ownerReferences") or [])
                     and (c.get("status") or {}).get("allocation")), None) if pod else None

    claim = until("the template's claim allocated", allocated)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert slice_device(env, result["pool"], result["device"])["attributes"]["profile"]["string"] == "3g.20gb"
    until("its charges counted", lambda: quota_used(env).get(devices) == "1"
          and quota_used(env).get("requests.nvidia.com/mig-3g.20gb") == "1")
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_pod(TEAM, mig_pod("unmodified-late"))
    assert refused.value.status == 403 and "exceeded quota: gpuctl-gpu-quota" in str(refused.value.body)
    assert "requests.nvidia.com/mig-3g.20gb=1" in str(refused.value.body), refused.value.body
    api.delete_namespaced_pod("by-template-2", TEAM, grace_period_seconds=0)


def templates(env: dict[str, str]) -> list[dict[str, Any]]:
    from kubernetes.client import ResourceV1Api

    data = ResourceV1Api(client(env)).list_namespaced_resource_claim_template(TEAM, _preload_content=False).data
    return list(json.loads(data)["items"])
