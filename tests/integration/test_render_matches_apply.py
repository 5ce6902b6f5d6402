"""`gpuctl render` prints what `gpuctl apply` writes: on one sim cluster applied from a spec with a shared
(time-sliced) node group that Karpenter also scales, Kueue and a tenant, every object render prints for that spec
exists with the fields render sets, and the stream goes through the pinned kubectl as a GitOps tool would send
it: `kubectl apply --dry-run=server -f -` accepts it, and `kubectl diff -f -` finds nothing to change."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl

pytestmark = pytest.mark.integration
CLUSTER = "render"
TEAM = "team-r"


def spec_text(gpus: int = 2) -> str:
    return yaml.safe_dump({
        "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": CLUSTER},
        "spec": {"provider": {"cloud": "sim"}, "karpenter": {"enabled": True}, "kueue": {"enabled": True},
                 "nodeGroups": [{"name": "slices", "gpu": "t4", "nodes": 1, "maxNodes": 2,
                                 "sharing": {"timeSlicing": {"replicas": 4}}, "labels": {"workload": "inference"}}],
                 "tenants": [{"name": TEAM, "gpus": gpus, "group": "team-r-devs"}]}})


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.support.tools import ensure_tools

    ensure_tools(["karpenter-kwok"], print)  # cached under ~/.cache/gpuctl/tools: a build only on a fresh machine
    root = tmp_path_factory.mktemp("render")
    env = dict(sim_env, KUBECONFIG=str(root / "kubeconfig"))
    spec = root / "spec.yaml"
    spec.write_text(spec_text())
    proc = run_gpuctl("apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    env["SPEC"] = str(spec)
    yield env
    proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env)
    assert proc.returncode == 0, proc.stderr


def rendered(env: dict[str, str], spec: str | None = None) -> str:
    proc = run_gpuctl("render", "-f", spec or env["SPEC"], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def kubectl(env: dict[str, str], *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    from tests.support.tools import find_tool

    tool = find_tool("kubectl")
    assert tool is not None
    return subprocess.run([str(tool), "--kubeconfig", env["KUBECONFIG"], *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def quantities(value: Any) -> Any:
    """Numbers as the strings the API server may write them back as (a quota 2 and "2" mean the same)."""
    if isinstance(value, dict):
        return {k: quantities(v) for k, v in value.items()}
    if isinstance(value, list):
        return [quantities(v) for v in value]
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def differences(want: Any, have: Any, path: str = "") -> list[str]:
    """The fields of `want` that `have` lacks or holds otherwise (server-set fields of `have` are ignored)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{path}: {have!r}"]
        return [d for k, v in want.items() for d in differences(v, have.get(k), f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return [f"{path}: {have!r} for {want!r}"]
        return [d for i, (w, h) in enumerate(zip(want, have, strict=True)) for d in differences(w, h, f"{path}[{i}]")]
    return [] if want == have else [f"{path}: {have!r} for {want!r}"]


def test_every_rendered_object_is_on_the_cluster_as_rendered(cluster: dict[str, str]) -> None:
    stream = rendered(cluster)
    docs = [d for d in yaml.safe_load_all(stream) if d]
    kinds = {d["kind"] for d in docs}
    assert {"NodePool", "NodeOverlay", "KWOKNodeClass", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy",
            "ResourceQuota", "RoleBinding", "ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds, kinds
    live = kubectl(cluster, "get", "-f", "-", "-o", "json", stdin=stream)  # each rendered object, read back
    assert live.returncode == 0, live.stderr
    items = json.loads(live.stdout)["items"]
    assert len(items) == len(docs)
    for doc, item in zip(docs, items, strict=True):
        where = f"{doc['kind']} {doc['metadata'].get('namespace', '')}/{doc['metadata']['name']}"
        assert (item["kind"], item["metadata"]["name"]) == (doc["kind"], doc["metadata"]["name"])
        assert differences(quantities(doc), quantities(item)) == [], where


def test_the_stream_applies_server_side_and_diffs_clean(cluster: dict[str, str], tmp_path: Path) -> None:
    stream = rendered(cluster)
    dry = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=stream)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("(server dry run)") == len([d for d in yaml.safe_load_all(stream) if d])
    diff = kubectl(cluster, "diff", "--server-side", "--field-manager=gpuctl", "--force-conflicts", "-f", "-",
                   stdin=stream)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr
    plain = kubectl(cluster, "diff", "-f", "-", stdin=stream)
    assert (plain.returncode, plain.stdout) == (0, ""), plain.stdout + plain.stderr
    # the same check sees a change: a spec that raises the tenant's quota differs in its quota and its queue
    edited = tmp_path / "edited.yaml"
    edited.write_text(spec_text(gpus=3))
    changed = kubectl(cluster, "diff", "--server-side", "--field-manager=gpuctl", "--force-conflicts", "-f", "-",
                      stdin=rendered(cluster, str(edited)))
    assert changed.returncode == 1, changed.stderr
    touched = sorted({line.split("/")[-1].split()[0] for line in changed.stdout.splitlines()
                      if line.startswith("diff ")})
    assert any("ResourceQuota" in t for t in touched) and any("ClusterQueue" in t for t in touched), touched
