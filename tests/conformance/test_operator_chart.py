"""Conformance: the Helm values gpuctl computes, rendered by the real upstream charts with the real helm.

Runs against the unmodified upstream copies in ../shared/upstream (see its README.md):
- the GPU Operator chart v26.7.0 (NVIDIA/gpu-operator deployments/gpu-operator at 10ee5b36): the
  ClusterPolicy it renders from `operator_release(...).values`, and the worker DaemonSet of the NFD
  0.19.0 subchart it vendors in charts/;
- the standalone Node Feature Discovery chart v0.19.0 (kubernetes-sigs/node-feature-discovery at
  45d276ed): the worker DaemonSet it renders from `nfd_values(...)`;
- the spec checks for the device plugin v0.20.0 that v26.7.0 ships: MPS is refused under the mixed MIG
  strategy (cmd/nvidia-device-plugin/main.go, validateFlags) and an MPS server takes at most 48
  clients from compute capability 7.5 on (cmd/mps-control-daemon/mps/device.go, maxClients).
tests/integration/test_upstream_crds.py applies the same renders to the real CRDs server-side.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.api import load_spec, to_platform
from tests.support.model import Taint
from tests.support.ops import manifests
from tests.support.stack import nfd_values, operator_release
from tests.support.tools import ensure_tools, find_tool
from tests.support.util import UsageError

pytestmark = pytest.mark.conformance  # the upstream charts rendered by the pinned helm (downloaded once)

UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
OPERATOR_CHART = UPSTREAM / "gpu-operator-v26.7.0" / "gpu-operator"
NFD_CHART = UPSTREAM / "nfd-v0.19.0" / "node-feature-discovery"
NAMESPACE = "gpu-operator"


@dataclass(frozen=True)
class Case:
    node_groups: str  # the spec's nodeGroups list, as YAML
    strategy: str  # the mig.strategy the device plugin can serve these groups under
    shares: bool  # some group uses time-slicing or MPS
    gpu_operator: str = "{}"

    @property
    def nfd_by_operator(self) -> bool:
        return "nfd: operator" in self.gpu_operator


TS = "{timeSlicing: {replicas: 4}}"
MPS = "{mps: {replicas: 4}}"
MIG = "{mig: {layout: 3g.20gb-2x2g.10gb}}"  # two profiles: only the mixed strategy advertises both
CASES = {
    "a-t4-plain": Case("- {name: plain, gpu: t4, nodes: 2}", "mixed", shares=False),
    "b-t4-time-slicing": Case(f"- {{name: inference, gpu: t4, nodes: 2, sharing: {TS}}}", "mixed", shares=True),
    "c-t4-mps": Case(f"- {{name: inference, gpu: t4, nodes: 2, sharing: {MPS}}}", "single", shares=True),
    "d-a100-mig-mixed": Case(f"- {{name: training, gpu: a100-40gb, nodes: 1, sharing: {MIG}}}", "mixed", shares=False),
    "e-a100-mig-single-t4-mps": Case(f"""
        - {{name: training, gpu: a100-40gb, nodes: 1, sharing: {{mig: {{layout: all-1g.5gb}}}}}}
        - {{name: inference, gpu: t4, nodes: 2, sharing: {MPS}}}""", "single", shares=True),
    "f-t4-time-slicing-a100-mig": Case(f"""
        - {{name: inference, gpu: t4, nodes: 2, sharing: {TS}}}
        - name: training
          gpu: a100-40gb
          nodes: 1
          sharing: {MIG}
          taints: ["nvidia.com/gpu=true:NoSchedule", "dedicated=training:NoExecute"]""", "mixed", shares=True),
    "g-nfd-by-operator-extra-taint": Case(f"""
        - name: inference
          gpu: t4
          nodes: 2
          sharing: {TS}
          taints: ["nvidia.com/gpu=true:NoSchedule", "dedicated=gpu:NoSchedule"]""", "mixed", shares=True,
                                          gpu_operator="{nfd: operator}"),
}


def spec_text(node_groups: str, gpu_operator: str = "{}") -> str:
    head = textwrap.dedent(f"""\
        apiVersion: gpuctl.dev/v1alpha1
        kind: GpuCluster
        metadata: {{name: conformance}}
        spec:
          provider: {{cloud: sim}}
          gpuOperator: {gpu_operator}
          nodeGroups:
        """)
    return head + textwrap.indent(textwrap.dedent(node_groups).strip() + "\n", "    ")


def load(tmp: Path, node_groups: str, gpu_operator: str = "{}"):
    path = tmp / "spec.yaml"
    path.write_text(spec_text(node_groups, gpu_operator))
    doc, groups = load_spec(path)
    return to_platform(doc, groups), groups


def helm_path() -> Path:
    """The pinned helm; a cached one without the installer's lock, which a running build may hold."""
    return find_tool("helm") or ensure_tools(["helm"])[0].path


def values_file(work: Path, release: str, values: dict[str, Any]) -> Path:
    path = work / f"values-{release}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def helm_template(chart: Path, release: str, values: Path) -> list[dict[str, Any]]:
    """Every object `helm template` renders from `chart` with the values file `values`."""
    proc = subprocess.run([str(helm_path()), "template", release, str(chart), "-n", NAMESPACE, "-f", str(values)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def only(objects: list[dict[str, Any]], kind: str, name_part: str = "") -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and name_part in o["metadata"]["name"]]


def nulls(value: Any, path: str = "") -> Iterator[str]:
    """The paths of every null in `value`."""
    if value is None:
        yield path or "."
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from nulls(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from nulls(item, f"{path}[{i}]")


def tolerates(tolerations: list[dict[str, Any]] | None, taint: Taint) -> bool:
    """Kubernetes' rule (k8s.io/api/core/v1 toleration.go, ToleratesTaint): an empty effect or key matches
    any; Exists ignores the value; Equal (the default operator) compares it."""
    for t in tolerations or ():
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("key") and t["key"] != taint.key:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.value:
            return True
    return False


def untolerated(tolerations: list[dict[str, Any]] | None, groups: list) -> list[str]:
    return [f"{g.doc.name}: {t}" for g in groups for t in g.taints if not tolerates(tolerations, t)]


def pod_tolerations(daemonset: dict[str, Any]) -> list[dict[str, Any]]:
    return daemonset["spec"]["template"]["spec"].get("tolerations") or []


@dataclass(frozen=True)
class Rendered:
    case: Case
    spec: Any  # PlatformSpec
    groups: list  # ValidGroup
    objects: list[dict[str, Any]]  # what the real operator chart renders

    @property
    def cluster_policy(self) -> dict[str, Any]:
        [policy] = only(self.objects, "ClusterPolicy")
        return policy


# -- the GPU Operator chart v26.7.0 ----------------------------------------------------------------


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    case = CASES[request.param]
    work = tmp_path_factory.mktemp(request.param)
    spec, groups = load(work, case.node_groups, case.gpu_operator)
    values = values_file(work, "gpu-operator", operator_release(spec.stack).values)
    return Rendered(case, spec, groups, helm_template(OPERATOR_CHART, "gpu-operator", values))


def test_cluster_policy_has_no_nulls(rendered: Rendered) -> None:
    """Server-side apply of a custom resource refuses a null where the CRD wants a value."""
    assert list(nulls(rendered.cluster_policy)) == []


def test_device_plugin_points_at_a_config_map_only_when_gpus_are_shared(rendered: Rendered) -> None:
    config = rendered.cluster_policy["spec"]["devicePlugin"].get("config") or {}
    if not rendered.case.shares:
        # the config-manager exits 1 on a ConfigMap with no keys: the operator must not name one
        assert not config.get("name"), config
        return
    assert config == {"name": "gpuctl-device-plugin-config", "default": "default"}
    written = manifests(rendered.spec)["10-configmap-gpuctl-device-plugin-config.yaml"]
    assert (written["metadata"]["namespace"], "default" in written["data"]) == (NAMESPACE, True)


def test_mig_strategy_and_mig_manager_config(rendered: Rendered) -> None:
    spec = rendered.cluster_policy["spec"]
    assert spec["mig"]["strategy"] == rendered.case.strategy
    if any(g.doc.sharing.strategy == "mps" for g in rendered.groups):
        assert spec["mig"]["strategy"] != "mixed"  # the device plugin refuses MPS under mixed
    config = spec["migManager"]["config"]
    assert config["name"] == "gpuctl-mig-parted-config"
    # the chart's contract: the ConfigMap has a key config.yaml that holds the default config
    written = manifests(rendered.spec)["10-configmap-gpuctl-mig-parted-config.yaml"]
    assert config["default"] in yaml.safe_load(written["data"]["config.yaml"])["mig-configs"]


def test_operands_tolerate_every_gpu_taint(rendered: Rendered) -> None:
    tolerations = rendered.cluster_policy["spec"]["daemonsets"]["tolerations"]
    assert untolerated(tolerations, rendered.groups) == []


def test_driver_and_toolkit_left_to_the_node_image(rendered: Rendered) -> None:
    spec = rendered.cluster_policy["spec"]
    # every provider's image ships both (the chart's defaults would install them)
    assert (rendered.spec.stack.driver, rendered.spec.stack.toolkit) == (False, False)
    assert (spec["driver"]["enabled"], spec["toolkit"]["enabled"]) == (False, False)


def test_nfd_subchart_only_when_the_operator_owns_nfd(rendered: Rendered) -> None:
    workers = only(rendered.objects, "DaemonSet", "node-feature-discovery-worker")
    if not rendered.case.nfd_by_operator:
        assert workers == []  # the standalone release runs NFD: never two workers per node
        return
    [worker] = workers
    assert untolerated(pod_tolerations(worker), rendered.groups) == []


# -- the standalone NFD chart v0.19.0 ---------------------------------------------------------------


@pytest.mark.parametrize("case_id", ["a-t4-plain", "f-t4-time-slicing-a100-mig"])
def test_standalone_nfd_worker_tolerates_every_gpu_taint(case_id: str, tmp_path: Path) -> None:
    spec, groups = load(tmp_path, CASES[case_id].node_groups)
    values = values_file(tmp_path, "node-feature-discovery", nfd_values(spec.stack))
    objects = helm_template(NFD_CHART, "node-feature-discovery", values)
    [worker] = only(objects, "DaemonSet", "node-feature-discovery-worker")
    assert untolerated(pod_tolerations(worker), groups) == []


# -- what the device plugin v0.20.0 refuses, refused up front ---------------------------------------


def test_mps_beside_a_layout_that_needs_mixed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        load(tmp_path, f"""
            - {{name: inference, gpu: t4, nodes: 1, sharing: {MPS}}}
            - {{name: training, gpu: a100-40gb, nodes: 1, sharing: {MIG}}}""")
    assert err.value.field == "spec.gpuOperator.migStrategy"
    assert "'inference'" in err.value.message and "'training'" in err.value.message


def test_explicit_mixed_strategy_with_mps_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        load(tmp_path, f"- {{name: inference, gpu: t4, nodes: 1, sharing: {MPS}}}", "{migStrategy: mixed}")
    assert err.value.field == "spec.gpuOperator.migStrategy"
    assert "'inference'" in err.value.message


def test_mps_replicas_on_t4_stop_at_48(tmp_path: Path) -> None:
    spec, _ = load(tmp_path, "- {name: inference, gpu: t4, nodes: 1, sharing: {mps: {replicas: 48}}}")
    assert spec.groups[0].sharing.replicas == 48
    with pytest.raises(UsageError) as err:
        load(tmp_path, "- {name: inference, gpu: t4, nodes: 1, sharing: {mps: {replicas: 49}}}")
    assert err.value.field == "spec.nodeGroups[0].sharing.mps.replicas"
