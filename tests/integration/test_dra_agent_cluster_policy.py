"""The sim operator with a ClusterPolicy in DRA mode: the device plugin off takes nvidia.com/gpu off the
nodes (a node whose plugin never ran never lists it), and with the DRA driver's real chart installed beside
the GPU Operator, CUDA samples get their GPU from DRA, through a claim or through nvidia.com/gpu limits the
scheduler serves from the driver's slices (KEP-5004), and `gpuctl validate` passes.

One cluster for the module: gpu-0 (one T4, served by the device plugin first), late-0 (added after the device
plugin was turned off).
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
import yaml
from kubernetes.client import AppsV1Api, CoreV1Api

from tests.conftest import run_gpuctl
from tests.integration.operator_pass import operator_pass
from tests.integration.test_dra_agent_real_chart import CHART, CUDA_SAMPLE, RELEASE, TOLERATE_GPU, until
from tests.support.kube import APPLY_PATCH, MERGE_PATCH, api_client
from tests.support.model import NodeGroupSpec, get_gpu
from tests.support.sim import KwokCluster, SimProvider
from tests.support.tools import ensure_tools
from tests.support.util import data_dir

pytestmark = pytest.mark.integration
NAME = "dra-policy"
NS = "work"
POLICY = ("nvidia.com", "v1", "clusterpolicies")
GPU_KEYS = ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb")


@dataclass(frozen=True)
class Cluster:
    client: Any
    kubeconfig: Path
    env: dict[str, str]

    @property
    def v1(self) -> Any:
        return CoreV1Api(self.client)

    @property
    def custom(self) -> Any:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.client)


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str]) -> Iterator[Cluster]:
    from kubernetes.client import ApiextensionsV1Api

    provider = SimProvider()
    provider.ensure_cluster(NAME)
    try:
        provider.ensure_node_group(NAME, NodeGroupSpec("gpu", get_gpu("t4"), 1, 1))
        kubeconfig = KwokCluster(NAME).kubeconfig_path
        client = api_client(kubeconfig)
        crd = yaml.safe_load((data_dir("templates") / "charts" / "gpu-operator" / "crds" /
                              "clusterpolicies.yaml").read_text())
        ApiextensionsV1Api(client).patch_custom_resource_definition(crd["metadata"]["name"], crd, field_manager="test",
                                                                   force=True, _content_type=APPLY_PATCH)
        for ns in ("gpu-operator", NS):
            CoreV1Api(client).create_namespace({"metadata": {"name": ns}})
        # the operator's Deployment, labelled as the chart labels it: the sim plays its reconciles, and without one a
        # ClusterPolicy is a GPU Operator gone (doctor's stack-missing, which validate runs)
        labels = {"app.kubernetes.io/component": "gpu-operator", "app": "gpu-operator"}
        AppsV1Api(client).create_namespaced_deployment("gpu-operator", {
            "metadata": {"name": "gpu-operator", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "gpu-operator", "image": "gpu-operator"}]}}}})
        yield Cluster(client, kubeconfig, dict(sim_env, KUBECONFIG=str(kubeconfig)))
    finally:
        provider.delete_cluster(NAME)


def gpu_keys(c: Cluster, node: str) -> dict[str, dict[str, str]]:
    status = c.v1.read_node(node).status
    return {kind: {k: v for k, v in (getattr(status, kind) or {}).items() if k.startswith("nvidia.com/")}
            for kind in ("capacity", "allocatable")}


def test_device_plugin_off_takes_its_resources_off_the_node(cluster: Cluster) -> None:
    body = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": {}}
    for attempt in range(50):  # the CRD is served a moment after it is applied
        try:
            cluster.custom.create_cluster_custom_object(*POLICY, body)
            break
        except Exception as exc:
            if getattr(exc, "status", None) != 404 or attempt == 49:
                raise
            time.sleep(0.2)
    served = {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}
    until("the device plugin serving gpu-0", lambda: gpu_keys(cluster, "gpu-0") == served, timeout=60)
    # someone's stale MIG resource too: the operator removes whatever a device plugin would have advertised
    stale = {GPU_KEYS[1]: "0"}
    cluster.v1.patch_node_status("gpu-0", {"status": {"capacity": stale, "allocatable": stale}},
                                 _content_type=MERGE_PATCH)
    off = {"spec": {"devicePlugin": {"enabled": False}}}
    cluster.custom.patch_cluster_custom_object(*POLICY, "cluster-policy", off, _content_type=MERGE_PATCH)
    until("nvidia.com/gpu off gpu-0", lambda: gpu_keys(cluster, "gpu-0") == {"capacity": {}, "allocatable": {}})

    until("the device-plugin DaemonSet gone", lambda: not [
        d for d in AppsV1Api(cluster.client).list_namespaced_daemon_set("gpu-operator").items
        if d.metadata.name == "nvidia-device-plugin-daemonset"])
    # the keys stay off: a pass of the operator begun after the DaemonSet went decides the node again
    operator_pass(cluster.v1, "gpu-0")
    assert gpu_keys(cluster, "gpu-0") == {"capacity": {}, "allocatable": {}}


def test_a_node_whose_device_plugin_never_ran_lists_no_gpu_resource(cluster: Cluster) -> None:
    SimProvider().ensure_node_group(NAME, NodeGroupSpec("late", get_gpu("t4"), 1, 1))
    # the operator has seen it once it labels it; a pass of it begun later decides the node again
    until("the operator labelling late-0",
          lambda: (cluster.v1.read_node("late-0").metadata.labels or {}).get("nvidia.com/gpu.present") == "true")
    operator_pass(cluster.v1, "late-0")
    assert gpu_keys(cluster, "late-0") == {"capacity": {}, "allocatable": {}}


def sample(name: str, node: str, claim: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "cuda", "image": CUDA_SAMPLE}
    spec: dict[str, Any] = {"restartPolicy": "Never", "tolerations": TOLERATE_GPU,
                            "nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def finished(c: Cluster, name: str) -> Any:
    return until(f"{name} to finish", lambda: p if (p := c.v1.read_namespaced_pod(name, NS)).status.phase in
                 ("Succeeded", "Failed") else None)


def test_with_the_dra_driver_beside_the_operator_cuda_samples_get_gpus_from_dra(cluster: Cluster) -> None:
    from kubernetes.client import ResourceV1Api

    helm = str(ensure_tools(["helm"])[0].path)
    subprocess.run([helm, "--kubeconfig", str(cluster.kubeconfig), "install", RELEASE, str(CHART), "--namespace",
                    RELEASE, "--create-namespace", "--set", "gpuResourcesEnabledOverride=true",
                    "--set", "resources.computeDomains.enabled=false", "--wait", "--timeout", "120s"],
                   check=True, capture_output=True, text=True)
    resource = ResourceV1Api(cluster.client)
    until("slices of gpu-0 and late-0", lambda: {s.spec.node_name for s in resource.list_resource_slice().items}
          == {"gpu-0", "late-0"})
    # nvidia.com/gpu limits on a node without the device plugin: the scheduler serves them from the slice
    cluster.v1.create_namespaced_pod(NS, sample("limits", "gpu-0"))
    done = finished(cluster, "limits")
    assert done.status.phase == "Succeeded" and done.status.extended_resource_claim_status is not None
    assert "Test PASSED" in cluster.v1.read_namespaced_pod_log("limits", NS)
    resource.create_namespaced_resource_claim(NS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "one", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    cluster.v1.create_namespaced_pod(NS, sample("claimed", "late-0", claim="one"))
    assert finished(cluster, "claimed").status.phase == "Succeeded"
    proc = run_gpuctl("-o", "json", "validate", env=cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert {c["check"] for c in json.loads(proc.stdout)} == {"capacity", "dra-driver", "smoke-test", "doctor"}
    rows = json.loads(run_gpuctl("-o", "json", "status", env=cluster.env).stdout)["nodes"]
    assert {(r["node"], r["devices"], r["allocatable"] == {}) for r in rows} == {("gpu-0", 1, True),
                                                                                  ("late-0", 1, True)}
