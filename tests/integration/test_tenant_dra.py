"""Tenants in DRA mode on a sim cluster of their own: the DeviceClasses of NVIDIA's DRA driver chart (v0.4.1,
rendered by the real helm), the ResourceSlices its kubelet plugin would publish (gpuctl.simulator.dra),
Kueue's real v0.19.2 manager. What is asserted is decided by real parts: the kube-apiserver's ResourceQuota
admission counts the claims, the resourceclaim controller makes them from gpuctl's templates, the
kube-scheduler allocates them from the slices, Kueue admits the jobs.

Nodes: a100-0 (4 full A100-40GB), a100-1 (4 A100-40GB with MIG 3g.20gb-2x2g.10gb: 12 MIG devices), t4-0 (1 T4).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from tests.conftest import run_gpuctl
from tests.integration.test_sim_dra import render_device_classes
from tests.support.kube import APPLY_PATCH, MERGE_PATCH, Kube, KubeApiError, KubeNotFound, api_client
from tests.support.model import NodeGroupSpec, config_name, get_gpu, parse_layout
from tests.support.model import labels as L
from tests.support.ops import granted
from tests.support.sim import KwokCluster, SimProvider, dra

pytestmark = pytest.mark.integration
NAME = "tdra"
GPU_DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG_DEVICES = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"  # the driver's class: capped at 0


def mig_devices(profile: str) -> str:
    """The quota key of gpuctl's DeviceClass of a MIG profile, which the team's template of it claims from."""
    return f"mig-{profile}.gpuctl.dev.deviceclass.resource.k8s.io/devices"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
HOLD = {"sim.gpuctl.dev/no-such-node": "true"}  # keeps a Job's pods (and its admitted quota) from completing
WAIT_S = 60.0


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    env: dict[str, str]
    client: Any  # kubernetes.client.ApiClient

    @property
    def resource(self) -> Any:
        from kubernetes.client import ResourceV1Api

        return ResourceV1Api(self.client)


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str]) -> Iterator[Cluster]:
    from kubernetes.client import ResourceV1Api

    from tests.support.sim import ensure_kueue

    started = time.monotonic()
    provider = SimProvider()
    provider.ensure_cluster(NAME)
    try:
        provider.ensure_node_group(NAME, NodeGroupSpec("a100", get_gpu("a100-40gb"), 2, 4))
        provider.ensure_node_group(NAME, NodeGroupSpec("t4", get_gpu("t4"), 1, 1))
        kubeconfig = KwokCluster(NAME).kubeconfig_path
        client = api_client(kubeconfig)
        layout = parse_layout("3g.20gb-2x2g.10gb", get_gpu("a100-40gb"))  # as the MIG manager leaves it
        CoreV1Api(client).patch_node("a100-1", {"metadata": {"labels": {L.MIG_CONFIG: config_name(layout),
                                                                   L.MIG_STATE: "success"}}},
                                _content_type=MERGE_PATCH)
        dra.publish_slices(Kube(client))
        for dc in render_device_classes():
            ResourceV1Api(client).patch_device_class(dc["metadata"]["name"], dc, field_manager="gpuctl", force=True,
                                                     _content_type=APPLY_PATCH)
        ensure_kueue(NAME)
        print(f"\nsim cluster {NAME!r} in DRA mode with Kueue in {time.monotonic() - started:.1f}s")
        yield Cluster(kubeconfig, sim_env, client)
    finally:
        KwokCluster(NAME).delete()


def gpuctl(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gpuctl("--kubeconfig", str(c.kubeconfig), *args, env=c.env)


def add(c: Cluster, team: str, *flags: str) -> dict[str, Any]:
    proc = gpuctl(c, "-o", "json", "tenant", "add", team, *flags)
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout), "stderr": proc.stderr}


def templates(c: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    data = json.loads(c.resource.list_namespaced_resource_claim_template(namespace, _preload_content=False).data)
    return {t["metadata"]["name"]: t for t in data["items"]}


def rows(c: Cluster) -> dict[str, dict[str, Any]]:
    proc = gpuctl(c, "-o", "json", "tenant", "list")
    assert proc.returncode == 0, proc.stderr
    return {r["tenant"]: r for r in json.loads(proc.stdout)}


def wait(what: str, probe: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (value := probe()):
        if time.monotonic() > deadline:
            log = KwokCluster(NAME).dir / "logs" / "kueue.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:]) if log.exists() else ""
            pytest.fail(f"{what}: not within {WAIT_S:.0f}s; Kueue's log ends:\n{tail}")
        time.sleep(0.3)
    return value


def service_account(c: Cluster, namespace: str) -> None:
    """Pods are admitted once the namespace's default ServiceAccount exists (the controller-manager makes it)."""
    def exists() -> bool:
        try:
            CoreV1Api(c.client).read_namespaced_service_account("default", namespace)
            return True
        except KubeNotFound:
            return False

    wait(f"ServiceAccount {namespace}/default", exists)


def claim(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class,
                                                                          "count": count}}]}}}


def pod_spec(template: str | None = None, gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["sleep", "3600"], "resources": {}}
    spec: dict[str, Any] = {"tolerations": TOLERATE_GPU, "containers": [container]}
    if template:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    return spec


def refused(create: Any) -> str:
    """The API server's message for a create it refuses with 403 Forbidden."""
    with pytest.raises(KubeApiError) as error:
        create()
    assert error.value.status == 403, error.value.body
    assert error.value.body is not None  # a refusal's Status object
    return str(json.loads(error.value.body)["message"])


def test_tenant_add_writes_templates_and_counts_devices_idempotently(cluster: Cluster) -> None:
    out = add(cluster, "team-a", "--gpus", "2", "--mig", "3g.20gb=1")
    assert out["change"] == "created" and "warning" not in out["stderr"], out["stderr"]
    hard = {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/mig-3g.20gb": "1", GPU_DEVICES: "2",
            mig_devices("3g.20gb"): "1"}  # (MIG_DEVICES: 0, which granted leaves out)
    assert out["quota"] == {k.removeprefix("requests."): int(v) for k, v in hard.items()}  # as tenant list names it
    assert granted(CoreV1Api(cluster.client).read_namespaced_resource_quota("gpuctl-gpu-quota", "team-a").spec.hard) == hard
    made = templates(cluster, "team-a")
    assert sorted(made) == ["gpu-a100-40gb", "gpu-t4", "mig-3g.20gb"]
    assert made["mig-3g.20gb"]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl",
                                                         "gpuctl.dev/tenant": "team-a"}
    [request] = made["gpu-t4"]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    [request] = made["mig-3g.20gb"]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig-3g.20gb.gpuctl.dev"
    # the cluster's classes are only the chart's: tenant add made gpuctl's class the template claims from
    made_class = cluster.resource.read_device_class("mig-3g.20gb.gpuctl.dev")
    assert made_class.spec.extended_resource_name == "nvidia.com/mig-3g.20gb"
    assert made_class.metadata.labels["app.kubernetes.io/managed-by"] == "gpuctl"

    again = add(cluster, "team-a", "--gpus", "2", "--mig", "3g.20gb=1")
    assert again["change"] == "no change"
    assert {n: t["metadata"]["resourceVersion"] for n, t in templates(cluster, "team-a").items()} == {
        n: t["metadata"]["resourceVersion"] for n, t in made.items()}  # nothing written
    # what the slices publish is what a quota is held against: 5 full GPUs, 12 MIG devices
    over = add(cluster, "team-big", "--gpus", "6", "--mig", "2g.10gb=9")
    assert "nvidia.com/gpu quota 6 is above the cluster's allocatable 5" in over["stderr"]
    assert "nvidia.com/mig-2g.10gb quota 9 is above the cluster's allocatable 8" in over["stderr"]
    # one warning per resource: its claimed devices' key holds the same figures
    assert "deviceclass.resource.k8s.io" not in over["stderr"], over["stderr"]


def test_the_api_server_refuses_claims_beyond_the_quota(cluster: Cluster) -> None:
    add(cluster, "team-q", "--gpus", "2", "--mig", "2g.10gb=1")
    create = cluster.resource.create_namespaced_resource_claim
    create("team-q", claim("pair", "gpu.nvidia.com", 2))  # within: accepted
    message = refused(lambda: create("team-q", claim("third", "gpu.nvidia.com", 1)))
    assert "exceeded quota: gpuctl-gpu-quota" in message and f"{GPU_DEVICES}=1" in message, message
    # MIG: per profile, by gpuctl's class of it (the class names the extended resource, so the claim is charged
    # requests.nvidia.com/mig-2g.10gb too); the driver's mig.nvidia.com not at all
    create("team-q", claim("mig", "mig-2g.10gb.gpuctl.dev", 1))
    message = refused(lambda: create("team-q", claim("mig-2", "mig-2g.10gb.gpuctl.dev", 1)))
    assert f"{mig_devices('2g.10gb')}=1" in message and "requests.nvidia.com/mig-2g.10gb=1" in message, message
    message = refused(lambda: create("team-q", claim("any-mig", "mig.nvidia.com", 1)))
    assert f"limited: {MIG_DEVICES}=0" in message, message
    # DRAExtendedResource: a claim of gpu.nvidia.com also counts as requests.nvidia.com/gpu, so the two GPUs
    # claimed leave none for a pod asking for nvidia.com/gpu the device plugin's way
    service_account(cluster, "team-q")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "classic"}, "spec": pod_spec(gpus=1)}
    message = refused(lambda: CoreV1Api(cluster.client).create_namespaced_pod("team-q", pod))
    assert "requests.nvidia.com/gpu=1" in message and "used: requests.nvidia.com/gpu=2" in message, message
    cluster.resource.delete_namespaced_resource_claim("pair", "team-q")
    def room_again() -> bool:  # once the quota controller has counted the claim out
        try:
            create("team-q", claim("one", "gpu.nvidia.com", 1))
            return True
        except KubeApiError as exc:
            assert exc.status == 403, exc.body
            return False

    wait("room in the quota once a claim is gone", room_again)


def test_pods_claiming_the_templates_get_their_model_and_show_in_tenant_list(cluster: Cluster) -> None:
    add(cluster, "team-s", "--gpus", "2", "--mig", "3g.20gb=1")
    service_account(cluster, "team-s")
    v1 = CoreV1Api(cluster.client)
    wanted = {"on-t4": "gpu-t4", "on-a100": "gpu-a100-40gb", "on-mig": "mig-3g.20gb"}
    for name, template in wanted.items():
        v1.create_namespaced_pod("team-s", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                            "spec": pod_spec(template)})

    def placed() -> dict[str, str] | None:
        pods = {n: v1.read_namespaced_pod(n, "team-s") for n in wanted}
        return {n: p.spec.node_name for n, p in pods.items()} if all(p.spec.node_name for p in pods.values()) else None

    assert wait("pods scheduled", placed) == {"on-t4": "t4-0", "on-a100": "a100-0", "on-mig": "a100-1"}
    [status] = v1.read_namespaced_pod("on-mig", "team-s").status.resource_claim_statuses
    data = json.loads(cluster.resource.read_namespaced_resource_claim(status.resource_claim_name, "team-s",
                                                                      _preload_content=False).data)
    [result] = data["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == "a100-1" and "-mig-3g20gb-" in result["device"]

    def listed() -> dict[str, Any] | None:
        row = rows(cluster)["team-s"]
        return row if row["used"].get(GPU_DEVICES) == 2 else None

    row = wait("tenant list shows the claimed devices", listed)
    assert row["quota"][GPU_DEVICES] == 2 and row["quota"][mig_devices("3g.20gb")] == 1
    assert row["used"][GPU_DEVICES] == 2 and row["used"][mig_devices("3g.20gb")] == 1
    assert row["used"]["nvidia.com/mig-3g.20gb"] == 1 and MIG_DEVICES not in row["quota"]
    assert row["used"]["nvidia.com/gpu"] == 2  # the claims, counted as the extended resource too
    table = gpuctl(cluster, "tenant", "list")
    assert table.returncode == 0, table.stderr
    # the table names what pods request (80 columns); -o wide adds the claimed devices' twins
    [line] = [line for line in table.stdout.splitlines() if line.startswith("team-s ")]
    assert line.split()[1:] == ["nvidia.com/gpu=2,nvidia.com/mig-3g.20gb=1", "nvidia.com/gpu=2,nvidia.com/mig-3g.20gb=1"]
    wide = gpuctl(cluster, "-o", "wide", "tenant", "list")
    assert f"{GPU_DEVICES}=2" in wide.stdout and f"{mig_devices('3g.20gb')}=1" in wide.stdout, wide.stdout


def test_templates_follow_the_quota_and_the_nodes(cluster: Cluster) -> None:
    provider = SimProvider()
    add(cluster, "team-m", "--gpus", "1", "--mig", "1g.10gb=1", "--mig", "2g.10gb=2")
    before = templates(cluster, "team-m")
    assert sorted(before) == ["gpu-a100-40gb", "gpu-t4", "mig-1g.10gb", "mig-2g.10gb"]
    cluster.resource.create_namespaced_resource_claim_template("team-m", {
        "metadata": {"name": "own"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    # an H100 group: a template for it; its 1g.10gb MIG devices also answer mig-1g.10gb, whose class selects
    # the profile on any model: that template stays as it is
    provider.ensure_node_group(NAME, NodeGroupSpec("h100", get_gpu("h100-80gb"), 1, 1))
    try:
        out = add(cluster, "team-m", "--mig", "2g.10gb=0")  # 2g.10gb no longer in the quota
        assert out["change"] == "updated"
        after = templates(cluster, "team-m")
        assert sorted(after) == ["gpu-a100-40gb", "gpu-h100-80gb", "gpu-t4", "mig-1g.10gb", "own"]
        [request] = after["mig-1g.10gb"]["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "mig-1g.10gb.gpuctl.dev"
        assert "selectors" not in request["exactly"]
        assert after["mig-1g.10gb"]["metadata"]["uid"] == before["mig-1g.10gb"]["metadata"]["uid"]
        assert after["gpu-t4"]["metadata"]["uid"] == before["gpu-t4"]["metadata"]["uid"]  # untouched
    finally:
        provider.delete_node_group(NAME, "h100")


def test_an_adopted_namespace_keeps_the_teams_own_templates(cluster: Cluster) -> None:
    v1 = CoreV1Api(cluster.client)
    v1.create_namespace({"metadata": {"name": "shared"}})
    own = {"metadata": {"name": "gpu-t4"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "any", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    cluster.resource.create_namespaced_resource_claim_template("shared", own)
    out = add(cluster, "shared", "--gpus", "1", "--adopt")
    assert "ResourceClaimTemplate shared/gpu-t4 is not gpuctl's: left as it is" in out["stderr"]
    made = templates(cluster, "shared")
    assert sorted(made) == ["gpu-a100-40gb", "gpu-t4"] and "labels" not in made["gpu-t4"]["metadata"]
    proc = gpuctl(cluster, "tenant", "remove", "shared", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert sorted(templates(cluster, "shared")) == ["gpu-t4"]  # the team's, in the namespace gpuctl leaves


def test_kueue_charges_nvidia_gpu_however_a_job_asks_for_gpus(cluster: Cluster) -> None:
    """Kueue's own accounting: a claim template, requests and limits alone all count as nvidia.com/gpu."""
    from kubernetes.client import BatchV1Api, CustomObjectsApi

    add(cluster, "team-k", "--gpus", "4", "--cohort", "dra")
    custom = CustomObjectsApi(cluster.client)
    queue = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", "team-k")
    [group] = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == [MIG_DEVICES, "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == ["gpuctl-dra"]

    def submit(name: str, pods: int, template: str | None = None, gpus: int = 0, requests: bool = False) -> None:
        spec = {**pod_spec(template, gpus), "restartPolicy": "Never", "nodeSelector": HOLD}
        if requests:
            spec["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": str(gpus)}
        BatchV1Api(cluster.client).create_namespaced_job("team-k", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team-k"}},
            "spec": {"suspend": True, "parallelism": pods, "completions": pods, "template": {"spec": spec}}})

    def admitted(job: str) -> bool:
        for wl in custom.list_namespaced_custom_object(*KUEUE, "team-k", "workloads")["items"]:
            if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
                return any(c["type"] == "Admitted" and c["status"] == "True"
                           for c in (wl.get("status") or {}).get("conditions") or [])
        return False

    def used() -> int:
        usage = (rows(cluster)["team-k"].get("queue") or {}).get("gpuctl-dra", {}).get("nvidia.com/gpu", {})
        return int(usage.get("used", 0))

    service_account(cluster, "team-k")
    submit("claims", 2, template="gpu-a100-40gb")  # two pods, a claim each: the ResourceClaimTemplate path
    wait("claims admitted", lambda: admitted("claims"))
    assert wait("2 GPUs in use", lambda: used() == 2)
    submit("requests", 1, gpus=1, requests=True)  # the extended resource path (the DeviceClass's extendedResourceName)
    wait("requests admitted", lambda: admitted("requests"))
    assert wait("3 GPUs in use", lambda: used() == 3)
    submit("limits", 1, gpus=1)  # limits alone: Kueue makes them requests
    wait("limits admitted", lambda: admitted("limits"))
    assert wait("4 GPUs in use", lambda: used() == 4)
    submit("over", 1, template="gpu-a100-40gb")

    def refused(job: str) -> dict[str, Any] | None:
        """Kueue's refusal: the Workload's QuotaReserved condition False, with its message."""
        for wl in custom.list_namespaced_custom_object(*KUEUE, "team-k", "workloads")["items"]:
            if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
                reserved = next((c for c in (wl.get("status") or {}).get("conditions") or []
                                 if c["type"] == "QuotaReserved"), None)
                return reserved if reserved and reserved["status"] == "False" and reserved.get("message") else None
        return None

    reason = wait("Kueue's refusal of over", lambda: refused("over"))
    assert "nvidia.com/gpu" in reason["message"] and "gpuctl-dra" in reason["message"], reason
    assert not admitted("over")
