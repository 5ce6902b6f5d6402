"""`plan` and `apply` walk one step list (gpuctl/ops/platform/steps.py): plan observes, apply acts.

Without a cluster: the names plan lists before the cluster exists are the names apply builds for a fresh
cluster, for every spec file under tests/, from the spec alone; and plan writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.api import load_document, load_spec, to_platform
from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.spec import PlatformSpec
from gpuctl.model.target import ClusterTarget
from gpuctl.ops.platform.run import Cluster, Run
from gpuctl.ops.platform.steps import cloud_steps, cluster_steps, selectors, unreached
from gpuctl.providers import get_provider
from gpuctl.providers.base import ClusterInfo, NodeGroupInfo
from gpuctl.util.errors import GpuctlError

TESTS = Path(__file__).resolve().parents[1]


def _spec_files() -> list[Path]:
    """Every GpuCluster file under tests/ that loads (a deliberately invalid one is no platform)."""
    found = []
    for path in sorted(TESTS.rglob("*.yaml")):
        if "kind: GpuCluster" not in path.read_text(errors="replace"):
            continue
        try:
            load_spec(path)
        except GpuctlError:
            continue
        found.append(path)
    return found


def _platform(doc: dict[str, Any]) -> PlatformSpec:
    return to_platform(*load_document(doc))


def _steps(spec: PlatformSpec, provider: Any, cluster: Cluster) -> list[Step]:
    """The whole list, as apply and plan run it: the cloud's steps, then the cluster's, built from `cluster`."""
    run = Run()
    return [*cloud_steps(spec, provider, run), *cluster_steps(provider, cluster, run)]


def _names(spec: PlatformSpec, cluster: Any) -> list[str]:
    """The step names of the list when the cluster is read as `cluster(spec, provider)`; no step is observed or
    run."""
    provider = get_provider(spec.cloud, spec.options)
    return [s.name for s in _steps(spec, provider, cluster(spec, provider))]


def _fresh(spec: PlatformSpec, provider: Any) -> Cluster:
    """What read_cluster() finds on a cluster apply has just made: no recorded group, no GPU stack, no
    validation."""
    from gpuctl.stack.owners import StackPlan

    return Cluster(spec, selectors(spec, provider), StackPlan(), None, False, client=Kube(None))


SPECS = _spec_files()


def test_the_spec_files_are_found() -> None:
    assert {p.name for p in SPECS} >= {"good.yaml", "readme-platform.yaml"}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(TESTS)))
def test_plan_before_the_cluster_lists_what_apply_builds_for_a_fresh_one(path: Path) -> None:
    spec = to_platform(*load_spec(path))
    assert _names(spec, unreached) == _names(spec, _fresh)


def test_the_order_of_apply() -> None:
    spec = to_platform(*load_spec(TESTS / "specs" / "good.yaml"))
    assert _names(spec, unreached) == [
        "ensure-cluster", "ensure-nodegroup/inference", "ensure-nodegroup/training", "write-kubeconfig",
        "write-gpu-config", "configure-nodes/inference", "configure-nodes/training", "install-nfd",
        "install-gpu-operator", "restart-device-plugin", "apply-mig/training", "wait-capacity/inference",
        "wait-capacity/training", "ensure-gpu-tolerations", "ensure-tenant/team-a", "ensure-tenant/team-b",
        "validate/inference",
        "validate/training"]


def test_an_eks_spec_lists_its_karpenter_step_and_the_rest_without_a_cloud_call() -> None:
    spec = _platform({"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "c"},
                      "spec": {"provider": {"cloud": "eks", "region": "us-east-1"}, "karpenter": {"enabled": True},
                               "kueue": {"enabled": True}, "dra": {"enabled": True},
                               "nodeGroups": [{"name": "g", "gpu": "a100-40gb", "nodes": 1}],
                               "tenants": [{"name": "team", "gpus": 1}]}})
    names = _names(spec, unreached)
    assert names == _names(spec, _fresh)
    assert names[names.index("write-kubeconfig") + 1:] == [
        "write-gpu-config", "enable-node-repair", "apply-karpenter-nodepool", "configure-nodes/g", "install-nfd",
        "install-gpu-operator",
        "install-dra-driver", "apply-mig-device-classes", "restart-device-plugin", "wait-capacity/g", "ensure-gpu-tolerations", "install-kueue",
        "ensure-tenant/team",
        "validate/g"]


def test_a_cluster_not_reached_observes_every_step_from_the_spec() -> None:
    spec = to_platform(*load_spec(TESTS / "specs" / "good.yaml"))
    why = Observed(Change.UPDATED, "unknown: no such context")
    steps = _steps(spec, get_provider("sim", None), unreached(spec, get_provider("sim", None), why))
    cluster_side = steps[steps.index(next(s for s in steps if s.name == "write-kubeconfig")) + 1:]
    observed = {s.name: s.observe() for s in cluster_side}
    assert {o.detail for o in observed.values()} == {"unknown: no such context"}
    assert {n for n, o in observed.items() if o.action is Change.CHECK} == {
        "wait-capacity/inference", "wait-capacity/training", "validate/inference", "validate/training"}


class _CloudOnly:
    """A provider whose cluster exists, read-only: any write fails the test."""

    cloud = "sim"

    def __init__(self, exists: bool) -> None:
        self.exists = exists

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("ensure_", "delete_", "scale_")) or name == "kubeconfig":
            raise AssertionError(f"plan called {name}")
        return getattr(get_provider("sim", None), name)

    def get_cluster(self, name: str) -> ClusterInfo | None:
        return ClusterInfo(name, "sim", "running", None, "1.34") if self.exists else None

    def get_node_group(self, cluster: str, name: str) -> NodeGroupInfo | None:
        return NodeGroupInfo(name, cluster, "t4", 3, 3, 1) if self.exists else None


@pytest.mark.parametrize("exists", [False, True])
def test_plan_writes_nothing(exists: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cloud write, no kubeconfig, no state: before the cluster exists, and where the kubeconfig has
    no context for it (every cluster-side step then says why it is unknown)."""
    from gpuctl.ops.platform import plan

    kubeconfig = tmp_path / "kube" / "config"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [], "clusters": [],
                                          "users": []}))
    before = kubeconfig.read_bytes()
    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(plan, "get_provider", lambda cloud, options: _CloudOnly(exists))
    spec = to_platform(*load_spec(TESTS / "specs" / "good.yaml"))
    planned = plan.plan_platform(spec, ClusterTarget(kubeconfig))
    assert [p.step for p in planned] == _names(spec, unreached)
    assert kubeconfig.read_bytes() == before and sorted(tmp_path.rglob("*")) == [kubeconfig.parent, kubeconfig]
    by_name = {p.step: p for p in planned}
    assert by_name["ensure-cluster"].action is (Change.NO_CHANGE if exists else Change.CREATED)
    assert by_name["write-kubeconfig"].detail == f"adds context gpuctl-sim-platform to {kubeconfig}"
    assert by_name["validate/training"].action is Change.CHECK
    detail = by_name["install-gpu-operator"].detail
    assert (detail == f"unknown: --context: no context 'gpuctl-sim-platform' in {kubeconfig}" if exists
            else detail == "once the cluster exists")


def test_a_step_is_named_observed_and_acted() -> None:
    step = Step("x", lambda: Observed(Change.UPDATED, "why", "diff"), lambda: Change.UPDATED)
    assert (step.name, step.observe(), step.act(), step.check) == ("x", Observed(Change.UPDATED, "why", "diff"),
                                                                   Change.UPDATED, False)


def test_a_tenants_observe_reads_the_gpu_nodes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """In DRA mode with Kueue, plan's look at a tenant needs the GPU nodes twice (its claim templates, its queues'
    flavors): one LIST serves both."""
    from gpuctl.model.tenant import Tenant
    from gpuctl.ops.platform import tenants

    reads: list[str] = []
    shaped: list[list[Any]] = []

    def gpu_nodes(kube: Kube) -> list[Any]:
        reads.append("nodes")
        return []

    def shapes(nodes: list[Any]) -> list[Any]:
        shaped.append(nodes)
        return []

    monkeypatch.setattr(tenants, "gpu_nodes", gpu_nodes)
    monkeypatch.setattr(tenants, "tenant_manifests", lambda tenant, dra: [])
    monkeypatch.setattr(tenants, "claim_templates_differ", lambda kube, name, templates: False)
    monkeypatch.setattr(tenants, "Queues", lambda kube: type("Served", (), {"installed": lambda self: True})())
    monkeypatch.setattr(tenants, "observe_queues", lambda kube, tenant, shapes, dra: Change.NO_CHANGE)
    observed = tenants.observe_tenant(Kube.__new__(Kube), Tenant("team-a", 2, group="ml-team"), True, shapes)
    assert observed.action is Change.NO_CHANGE
    assert reads == ["nodes"] and shaped == [[]]


def test_a_plan_diff_shows_a_key_the_cluster_lacks_as_added() -> None:
    from gpuctl.ops.platform.diffs import diff_text, subset

    current = {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}, "status": {"used": {}}}
    wanted = {"spec": {"hard": {"requests.nvidia.com/gpu": "4", "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "4"}}}
    assert subset(current, wanted) == {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}
    diff = diff_text(yaml.safe_dump(subset(current, wanted)), yaml.safe_dump(wanted), "quota/team-a").splitlines()
    assert [line for line in diff if line[:1] in "+-" and not line.startswith(("---", "+++"))] == [
        "+    gpu.nvidia.com.deviceclass.resource.k8s.io/devices: '4'"]
    assert subset(None, wanted) is None  # no object: all of it is new
