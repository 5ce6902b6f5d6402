"""DRA mode end to end through the CLI, as a user runs it: `apply -f` of a spec with `dra: {enabled: true}` on
sim (the DRA driver's stand-in chart through real helm, the operator's device plugin off, slices published
where the driver's kubelet plugin runs), then the real kube-scheduler allocating the claims of a team's pods,
`mig apply` turning GPUs into MIG devices, `validate` failing with exit 6 when no device is free, and a rerun
without DRA refused before any write."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.test_apply import REAPPLY

pytestmark = pytest.mark.integration
NAME = "dramode"
TEAM = "team-dra"
SPEC = {
    "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": NAME},
    "spec": {
        "provider": {"cloud": "sim"},
        "nodeGroups": [{"name": "a100", "gpu": "a100-40gb", "nodes": 2}, {"name": "t4", "gpu": "t4", "nodes": 1}],
        "dra": {"enabled": True},
        "tenants": [{"name": TEAM, "gpus": 4, "mig": {"3g.20gb": 2}}],
    },
}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def write_spec(path: Path, **changes: Any) -> Path:
    doc = json.loads(json.dumps(SPEC))
    doc["spec"].update(changes)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("dramode")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    spec = write_spec(root / "spec.yaml")
    started = time.monotonic()
    proc = run_gpuctl("-o", "json", "apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    from kubernetes import config

    yield {"env": env, "spec": spec, "root": root, "first": json.loads(proc.stdout),
           "seconds": time.monotonic() - started, "client": config.new_client_from_config(env["KUBECONFIG"])}
    assert run_gpuctl("cluster", "delete", "--name", NAME, "--yes", env=env).returncode == 0


def gpuctl_json(env: dict[str, str], *args: str) -> Any:
    proc = run_gpuctl("-o", "json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def slices(client: Any) -> list[dict[str, Any]]:
    from kubernetes.client import ResourceV1Api

    return json.loads(ResourceV1Api(client).list_resource_slice(_preload_content=False).data)["items"]


def claim_pod(client: Any, name: str, namespace: str, template: str, node_selector: dict[str, str],
              annotations: dict[str, str] | None = None) -> None:
    from kubernetes.client import CoreV1Api

    CoreV1Api(client).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"nodeSelector": node_selector, "tolerations": TOLERATE,
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                 "containers": [{"name": "main", "image": "busybox:1.37", "resources": {"claims": [{"name": "gpu"}]}}]}})


def allocated_device(client: Any, namespace: str, pod: str, timeout: float = 30.0) -> tuple[str, str]:
    """(node, device) the scheduler allocated to the claim of `pod`."""
    from kubernetes.client import CoreV1Api, ResourceV1Api

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = CoreV1Api(client).read_namespaced_pod(pod, namespace).status
        names = [s.resource_claim_name for s in status.resource_claim_statuses or [] if s.resource_claim_name]
        if names:
            claim = json.loads(ResourceV1Api(client).read_namespaced_resource_claim(
                names[0], namespace, _preload_content=False).data)
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
            if results:
                return results[0]["pool"], results[0]["device"]
        time.sleep(0.3)
    raise AssertionError(f"the claim of {namespace}/{pod} was not allocated within {timeout:.0f}s")


def test_apply_installs_the_driver_and_validates_through_claims(cluster: dict[str, Any]) -> None:
    steps = {s["step"]: s["outcome"] for s in cluster["first"]["steps"]}
    assert steps["install-dra-driver"] == "created" and steps["ensure-tenant/team-dra"] == "created"
    assert steps["validate/a100"] == steps["validate/t4"] == "passed"
    checks = [c for c in cluster["first"]["checks"] if c["check"] == "smoke-test"]
    assert checks and all("ResourceClaim" in c["detail"] for c in checks)
    # one slice per GPU node, one device per GPU; no node lists the device plugin's resource
    by_node = {s["spec"]["nodeName"]: s["spec"]["devices"] for s in slices(cluster["client"])}
    assert {n: len(d) for n, d in by_node.items()} == {"a100-0": 8, "a100-1": 8, "t4-0": 1}
    rows = {r["node"]: r for r in gpuctl_json(cluster["env"], "status")["nodes"]}
    assert {n: (r["devices"], r["free"], r["kubeletPlugin"]) for n, r in rows.items()} == {
        "a100-0": (8, 8, "ready"), "a100-1": (8, 8, "ready"), "t4-0": (1, 1, "ready")}
    assert all(not r["allocatable"] for r in rows.values())


def test_reapply_and_plan_change_nothing(cluster: dict[str, Any]) -> None:
    for verb in ("apply", "plan"):
        probe = REAPPLY.replace('"apply"', f'"{verb}"')
        proc = subprocess.run([sys.executable, "-c", probe, str(cluster["spec"])], capture_output=True, text=True,
                              env=cluster["env"], timeout=300)
        report = json.loads(proc.stderr.strip().splitlines()[-1])
        assert report == {"code": 0, "writes": []}, proc.stderr
        outcomes = {s.get("outcome", s.get("action")) for s in
                    (json.loads(proc.stdout)["steps"] if verb == "apply" else json.loads(proc.stdout))}
        assert outcomes == {"no change"}, proc.stdout


def test_a_teams_claims_are_allocated_and_counted(cluster: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api

    client = cluster["client"]
    claim_pod(client, "t4-job", TEAM, "gpu-t4", {"gpuctl.dev/nodegroup": "t4"})
    assert allocated_device(client, TEAM, "t4-job") == ("t4-0", "gpu-0")
    quota = CoreV1Api(client).read_namespaced_resource_quota("gpuctl-gpu-quota", TEAM).status.used
    assert quota["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "1"


def test_validate_fails_with_exit_6_when_no_device_is_free(cluster: dict[str, Any]) -> None:
    # t4-job of the test above holds the only T4
    proc = run_gpuctl("validate", "--nodegroup", "t4", "--timeout", "5", env=cluster["env"])
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr and "smoke-test" in proc.stderr
    from kubernetes.client import CoreV1Api

    CoreV1Api(cluster["client"]).delete_namespaced_pod("t4-job", TEAM, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        proc = run_gpuctl("validate", "--nodegroup", "t4", env=cluster["env"])
        if proc.returncode == 0:
            break
        time.sleep(1)
    assert proc.returncode == 0, proc.stderr


def test_a_mig_layout_becomes_mig_devices_a_profile_claim_gets(cluster: dict[str, Any]) -> None:
    proc = run_gpuctl("mig", "apply", "3g.20gb-2x2g.10gb", "--nodegroup", "a100", env=cluster["env"])
    assert proc.returncode == 0, proc.stderr
    assert "verify-devices" in proc.stderr
    by_node = {s["spec"]["nodeName"]: s["spec"]["devices"] for s in slices(cluster["client"])}
    profiles = sorted(d["attributes"]["profile"]["string"] for d in by_node["a100-0"])
    assert profiles == ["2g.10gb"] * 16 + ["3g.20gb"] * 8
    claim_pod(cluster["client"], "mig-job", TEAM, "mig-3g.20gb", {"gpuctl.dev/nodegroup": "a100"})
    node, device = allocated_device(cluster["client"], TEAM, "mig-job")
    assert node.startswith("a100-") and "-mig-3g20gb-" in device
    assert run_gpuctl("validate", "--nodegroup", "a100", env=cluster["env"]).returncode == 0


def test_top_shows_claimed_gpus_with_their_load_and_pods(cluster: dict[str, Any]) -> None:
    """dcgm-exporter as the GPU Operator runs it names no pod on a DRA device's series (the sim's exporter serves
    the load alone); `top` finds the pods through the ResourceClaims: a whole T4, and a MIG device its GPU has
    one instance of the profile of."""
    load = {"sim.gpuctl.dev/gpu-utilization": "40", "sim.gpuctl.dev/gpu-memory-mib": "2048"}
    claim_pod(cluster["client"], "t4-busy", TEAM, "gpu-t4", {"gpuctl.dev/nodegroup": "t4"}, load)
    assert allocated_device(cluster["client"], TEAM, "t4-busy") == ("t4-0", "gpu-0")
    deadline = time.monotonic() + 90
    while True:
        view = gpuctl_json(cluster["env"], "top")
        t4 = [g for g in view["gpus"] if g["node"] == "t4-0"]
        mig = [g for g in view["gpus"] if f"{TEAM}/mig-job" in g["pods"]]
        if t4 and t4[0]["gpuUtil"] == 40 and mig or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert t4 and (t4[0]["gpuUtil"], t4[0]["fbUsedMib"], t4[0]["pods"], t4[0]["attribution"]) == \
        (40, 2048, [f"{TEAM}/t4-busy"], "pod"), view
    assert [(g["migProfile"], g["attribution"]) for g in mig] == [("3g.20gb", "pod")], view
    team = next(t for t in view["tenants"] if t["tenant"] == TEAM)  # what its claims hold now
    assert (team["used"]["nvidia.com/gpu"], team["used"]["nvidia.com/mig-3g.20gb"]) == (1, 1), team
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"query": 'DCGM_FI_DEV_GPU_UTIL{hostname="t4-0"}'})
    with urllib.request.urlopen(f"{view['prometheus']}/api/v1/query?{query}", timeout=10) as answer:
        series = json.load(answer)["data"]["result"]
    assert series and all("pod" not in s["metric"] for s in series)  # the pods came from the claims


def test_leaving_dra_mode_is_refused_before_any_write(cluster: dict[str, Any]) -> None:
    spec = write_spec(cluster["root"] / "plain.yaml", dra={"enabled": False})
    proc = subprocess.run([sys.executable, "-c", REAPPLY, str(spec)], capture_output=True, text=True,
                          env=cluster["env"], timeout=300)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report == {"code": 2, "writes": []}, proc.stderr
    assert "a DRA driver serves GPUs on this cluster" in proc.stderr and "--dra" in proc.stderr
