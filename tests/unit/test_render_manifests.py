"""`gpuctl render`: stdout is only applyable Kubernetes manifests, every object apply writes is among them (the
Karpenter capacity, the admission policies, the tenants' objects, their Kueue queues), Helm values only under
--out or with --helm-values, and no output names a path of the machine that rendered it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.kube.kube import Kube
from gpuctl.model.spec import PlatformSpec
from tests.conftest import run_gpuctl

ROOT = Path(__file__).resolve().parents[2]
README_SPEC = ROOT / "tests" / "specs" / "readme-platform.yaml"
CLUSTER_SCOPED = {"Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "NodePool", "NodeOverlay",
                  "EC2NodeClass", "KWOKNodeClass", "ResourceFlavor", "ClusterQueue"}


def _eks_karpenter_spec(tmp_path: Path, env: dict[str, str]) -> Path:
    """The spec of the issue: `cluster create --cloud eks --gpu t4 --slices 4 --karpenter --export-spec`."""
    proc = run_gpuctl("cluster", "create", "--cloud", "eks", "--gpu", "t4", "--slices", "4", "--karpenter",
                      "--export-spec", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "eks.yaml"
    path.write_text(proc.stdout)
    return path


def _kueue_spec(tmp_path: Path) -> Path:
    path = tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "q"},
        "spec": {"provider": {"cloud": "sim"}, "kueue": {"enabled": True}, "karpenter": {"enabled": True},
                 "nodeGroups": [
                     {"name": "slices", "gpu": "t4", "nodes": 1, "maxNodes": 2,
                      "sharing": {"timeSlicing": {"replicas": 4}}, "taints": ["nvidia.com/gpu=true:NoSchedule"]},
                     {"name": "mig", "gpu": "a100-40gb", "nodes": 1, "sharing": {"mig": {"layout": "3g.20gb-2x2g.10gb"}}}],
                 "gpuOperator": {"migStrategy": "mixed"},
                 "tenants": [{"name": "team-a", "gpus": 2, "group": "devs", "mig": {"3g.20gb": 1}},
                             {"name": "team-b", "gpus": 1}]}}))
    return path


def _documents(stream: str) -> list[dict[str, Any]]:
    """Every document of a stream, each checked as kubectl needs it: apiVersion, kind, metadata.name, and
    metadata.namespace where the kind is namespaced."""
    docs = [d for d in yaml.safe_load_all(stream) if d is not None]
    for doc in docs:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), doc
        assert doc["metadata"].get("name"), doc
        assert ("namespace" in doc["metadata"]) == (doc["kind"] not in CLUSTER_SCOPED), doc
    return docs


def _no_local_path(text: str) -> None:
    from gpuctl.util.resources import data_dir

    for local in (str(ROOT), str(data_dir("templates")), str(Path.home())):
        assert local not in text


def _kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_stdout_of_the_readme_spec_is_only_manifests(isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("render", "-f", str(README_SPEC), env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = _documents(proc.stdout)
    assert "Helm values" not in proc.stdout and "\nnfd:" not in proc.stdout
    _no_local_path(proc.stdout)
    kinds = _kinds(docs)
    assert kinds.count("ConfigMap") == 4 and "NodePool" not in kinds  # no Karpenter in this spec
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
                 "MutatingAdmissionPolicyBinding", "ResourceQuota", "RoleBinding"):
        assert kind in kinds, kind
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["gpu-operator", "team-a", "team-b"]
    assert "ClusterQueue" not in kinds  # no Kueue in this spec


def test_an_eks_karpenter_spec_renders_its_capacity_and_values_only_under_out(
        tmp_path: Path, isolated_env: dict[str, str]) -> None:
    spec = _eks_karpenter_spec(tmp_path, isolated_env)
    proc = run_gpuctl("render", "-f", str(spec), env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = _documents(proc.stdout)
    karpenter = {d["kind"]: d for d in docs if d["apiVersion"].startswith("karpenter.")}
    assert sorted(karpenter) == ["EC2NodeClass", "NodeOverlay", "NodePool"]
    assert karpenter["NodeOverlay"]["spec"]["capacity"] == {"nvidia.com/gpu": "4"}  # 4 slices of 1 T4
    assert karpenter["EC2NodeClass"]["spec"]["role"] == "gpuctl-gpuctl-node"
    assert "Helm values" not in proc.stdout and "\nnfd:" not in proc.stdout  # no Helm values document

    out = tmp_path / "out"
    wrote = run_gpuctl("render", "-f", str(spec), "--out", str(out), env=isolated_env, timeout=60)
    assert wrote.returncode == 0, wrote.stderr
    manifests = sorted(p.name for p in (out / "manifests").iterdir())
    assert {"12-ec2nodeclass-gpuctl-gpu.yaml", "12-nodepool-gpuctl-gpu.yaml", "12-nodeoverlay-gpuctl-gpu.yaml"} <= set(manifests)
    written = [d for p in sorted((out / "manifests").iterdir()) for d in _documents(p.read_text())]
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    assert sorted(written, key=key) == sorted(docs, key=key) and len(written) == len(manifests)  # one object a file
    assert sorted(p.name for p in (out / "helm").iterdir()) == ["gpu-operator.values.yaml",
                                                                "node-feature-discovery.values.yaml"]
    header = (out / "helm" / "gpu-operator.values.yaml").read_text().splitlines()[:3]
    assert header[1] == "# chart: gpu-operator  version: v26.7.0  (repo https://helm.ngc.nvidia.com/nvidia)"
    assert header[2].startswith("# install: helm upgrade --install gpu-operator gpu-operator --repo "
                                "https://helm.ngc.nvidia.com/nvidia --version v26.7.0 --namespace gpu-operator")
    for path in out.rglob("*"):
        if path.is_file():
            _no_local_path(path.read_text())


def test_bundled_charts_are_named_by_their_upstream_chart(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    # the sim's charts are gpuctl's stand-ins in the checkout: the header names what a reader fetches instead
    proc = run_gpuctl("render", "-f", str(README_SPEC), "--helm-values", "node-feature-discovery",
                      env=isolated_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _no_local_path(proc.stdout)
    lines = proc.stdout.splitlines()
    assert lines[1] == ("# chart: node-feature-discovery  version: 0.19.0  "
                        "(repo https://kubernetes-sigs.github.io/node-feature-discovery/charts)")
    assert lines[3] == "# apply installs gpuctl's bundled stand-in of this chart (spec charts: bundled); it takes the same values"
    values = yaml.safe_load(proc.stdout)
    assert "apiVersion" not in values and "worker" in values  # a values file, for helm's -f -


@pytest.mark.parametrize("args,line", [
    (["--helm-values", "kueue"], "error: --helm-values: no Helm release 'kueue' in this spec; use one of: "
                                 "node-feature-discovery, gpu-operator"),
    (["--helm-values", "gpu-operator", "--out", "{out}"],
     "error: --helm-values: prints to stdout, and --out writes every values file; drop one of them"),
])
def test_a_bad_helm_values_request_is_one_line(args: list[str], line: str, tmp_path: Path,
                                               isolated_env: dict[str, str]) -> None:
    out = tmp_path / "out"
    proc = run_gpuctl("render", "-f", str(README_SPEC), *[a.replace("{out}", str(out)) for a in args],
                      env=isolated_env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == line and proc.stdout == "", proc.stderr
    assert not out.exists()


def _platform(path: Path) -> PlatformSpec:
    from gpuctl.api import load_spec, to_platform

    return to_platform(*load_spec(path))


def test_kueue_queues_come_from_the_specs_node_groups(tmp_path: Path) -> None:
    from gpuctl.ops.render import manifests

    docs = list(manifests(_platform(_kueue_spec(tmp_path))).values())
    _documents(yaml.safe_dump_all(docs))
    flavors = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ResourceFlavor"}
    toleration = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    assert flavors == {  # as flavors_of makes them from the nodes apply configures
        "gpuctl-t4-slice-4": {"nodeLabels": {"gpuctl.dev/gpu": "t4", "nvidia.com/device-plugin.config": "slice-4"},
                              "tolerations": toleration},
        "gpuctl-a100-40gb-custom-3g.20gb-2x2g.10gb": {
            "nodeLabels": {"gpuctl.dev/gpu": "a100-40gb", "nvidia.com/mig.config": "custom-3g.20gb-2x2g.10gb"},
            "tolerations": toleration}}
    queues = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterQueue"}
    groups = queues["team-a"]["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["nvidia.com/gpu"], ["nvidia.com/mig-3g.20gb"]]
    locals_ = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "LocalQueue"]
    assert locals_ == [("team-a", "team-a"), ("team-a", "default"), ("team-b", "team-b"), ("team-b", "default")]
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert names.index(("ResourceFlavor", "gpuctl-t4-slice-4")) < names.index(("ClusterQueue", "team-a"))
    assert names.index(("Namespace", "team-b")) < names.index(("LocalQueue", "team-b"))
    assert ("KWOKNodeClass", "gpuctl-gpu") in names and ("NodeOverlay", "gpuctl-slices") in names


def test_a_flavor_from_a_group_is_the_flavor_of_the_node_the_group_makes() -> None:
    from gpuctl.kube.kube_object import KubeObject
    from gpuctl.model.catalog import get_gpu
    from gpuctl.model.sharing import Sharing
    from gpuctl.model.spec import GroupPlan, NodeGroupSpec
    from gpuctl.model.taints import parse_taint
    from gpuctl.ops.tenancy.queues import flavors_of, group_shape, offered_flavors

    taint = parse_taint("nvidia.com/gpu=true:NoSchedule")
    plan = GroupPlan(NodeGroupSpec("slices", get_gpu("t4"), 1, 2, taints=(taint,)), Sharing("time-slicing", 4))
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "labels": {"gpuctl.dev/gpu": "t4", "gpuctl.dev/nodegroup": "slices",
                                                 "nvidia.com/device-plugin.config": plan.sharing.config_key}},
            "spec": {"taints": [taint.as_dict()]},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "4"}}}
    [from_node] = flavors_of([KubeObject(node)])  # as the API returns it
    assert offered_flavors([group_shape(plan, "mixed")]) == [from_node]


def test_apply_and_render_take_the_karpenter_objects_from_one_renderer(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path,
                                                                       isolated_env: dict[str, str]) -> None:
    from gpuctl import providers
    from gpuctl.ops.render import manifests
    from gpuctl.stack import karpenter

    spec = _platform(_eks_karpenter_spec(tmp_path, isolated_env))
    captured: list[Any] = []
    monkeypatch.setattr(karpenter, "nodepool_step", lambda client, objects, note="": captured.append(objects))
    providers.get_provider("eks", spec.options).cluster_steps(spec, Kube(None))  # what apply's step writes
    rendered = [d for d in manifests(spec).values() if d["apiVersion"].startswith("karpenter.")]
    assert captured[0]() == rendered and len(rendered) == 3
