"""A GPU stack release made by gpuctl's earlier Helm (v3.21.4) lives on under gpuctl's Helm 4 pin (issue 32):
`gpuctl apply` upgrades it in place (history, values and the chart's CRDs kept; Helm 4 keeps upgrading it with
client-side apply, as Helm 3 made it, while a release it installs new is server-side applied); `helm rollback` with
the new pin returns to the Helm 3 revision and its values; `helm list` and `helm history` of either major read every
release; a later `apply` converges the rolled-back release again; and Helm 3 rolls back to a revision Helm 4 wrote.

On one sim cluster of its own (a bare one, as a cloud hands it over: the Helm 3 release comes first), with
the upstream NFD v0.19.0 chart (small, with CRDs in crds/) and the GPU Operator v26.7.0 chart.
Helm 4's rules relied on (helm.sh/helm/v4@v4.3.1): an upgrade's --server-side defaults to "auto", the method the
release was last applied with, and a release Helm 3 stored has none, which is client-side
(pkg/action/upgrade.go, getUpgradeServerSideValue, isReleaseApplyMethodClientSideApply); an install applies
server-side (pkg/cmd/install.go L193); a rollback's "auto" takes the target revision's method
(pkg/action/rollback.go L178)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.conftest import sim_spec
from tests.support.tools import HELM_VERSION, ensure_installed, find_tool, helm_tool

pytestmark = pytest.mark.integration
UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream"
NFD_CHART = UPSTREAM / "nfd-v0.19.0" / "node-feature-discovery"
CLUSTER = "helm-majors"
NAMESPACE = "gpu-operator"
NFD = "node-feature-discovery"
OLD_HELM = "v3.21.4"  # gpuctl's pin before Helm 4
GROUP = "{name: gpu, gpu: t4, nodes: 1}"
# The same group with a second taint: NFD's worker tolerates each (its only gpuctl value), so the earlier
# release's values differ from what apply wants now, and apply upgrades it.
OLD_GROUP = ('{name: gpu, gpu: t4, nodes: 1, taints: ["nvidia.com/gpu=true:NoSchedule", '
             '"dedicated=old:NoSchedule"]}')


def chart_crds() -> set[str]:
    return {doc["metadata"]["name"] for path in (NFD_CHART / "crds").glob("*.yaml")
            for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "CustomResourceDefinition"}


def helm(binary: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, (binary, args, proc.stderr)
    return proc.stdout


def kubectl_json(env: dict[str, str], *args: str) -> Any:
    proc = subprocess.run([str(find_tool("kubectl")), *args, "-o", "json"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (args, proc.stderr)
    return json.loads(proc.stdout)


def deployment(env: dict[str, str], selector: str) -> dict[str, Any]:
    """The one Deployment in NAMESPACE with labels `selector`, its managedFields included."""
    found = kubectl_json(env, "get", "deployment", "-n", NAMESPACE, "-l", selector, "--show-managed-fields")["items"]
    assert len(found) == 1, (selector, [d["metadata"]["name"] for d in found])
    return found[0]


def rendered_values(spec: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = run_gpuctl("render", "-f", str(spec), "--helm-values", NFD, env=env)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def install_as_gpuctl_did(old_helm: Path, kubeconfig: Path, values: dict[str, Any]) -> None:
    """What gpuctl did at the v3.21.4 pin (gpuctl/stack/helm.py before Helm 4): pyhelm3's install_or_upgrade with
    atomic and wait, which pyhelm3 0.5.8 runs for Helm 3 as `helm upgrade --install --atomic --wait
    --wait-for-jobs --history-max 10 --timeout 5m --create-namespace`."""
    import pyhelm3

    async def install() -> None:
        client = pyhelm3.Client(executable=str(old_helm), kubeconfig=kubeconfig, default_timeout="5m")
        assert client.version.major == 3
        chart = await client.get_chart(str(NFD_CHART))
        await client.install_or_upgrade_release(NFD, chart, values, namespace=NAMESPACE, create_namespace=True,
                                                atomic=True, wait=True, timeout="5m")

    asyncio.run(install())


def apply(spec: Path, env: dict[str, str]) -> dict[str, str]:
    proc = run_gpuctl("-o", "json", "apply", "-f", str(spec), env=env)
    assert proc.returncode == 0, proc.stderr
    # gpuctl asks Helm 4 for --rollback-on-failure itself: pyhelm3 warns on stderr when asked for --atomic there.
    assert "deprecated" not in proc.stderr, proc.stderr
    return {s["step"]: s["outcome"] for s in json.loads(proc.stdout)["steps"]}


@pytest.fixture(scope="module")
def cluster(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A bare sim cluster (one T4 node, no stack), spec files for it (the earlier group and today's), and both
    Helm binaries: the pin and v3.21.4 (installed as the pin is, cached by its version)."""
    from tests.support.kube import write_kubeconfig
    from tests.support.model import NodeGroupSpec, get_gpu
    from tests.support.sim import SimProvider

    root = tmp_path_factory.mktemp("helm-majors")
    kubeconfig = root / "kubeconfig"
    env = dict(sim_env, KUBECONFIG=str(kubeconfig))
    charts = root / "charts"
    charts.mkdir()
    (charts / NFD).symlink_to(NFD_CHART)
    (charts / "gpu-operator").symlink_to(UPSTREAM / "gpu-operator-v26.7.0" / "gpu-operator")
    operator = f"{{nfd: standalone, charts: {json.dumps(str(charts))}}}"
    specs = {}
    for name, group in (("old", OLD_GROUP), ("new", GROUP)):
        specs[name] = root / f"{name}.yaml"
        specs[name].write_text(sim_spec(CLUSTER, group, operator))
    [old] = ensure_installed([helm_tool(OLD_HELM)], print)
    provider = SimProvider()
    try:
        provider.ensure_cluster(CLUSTER)
        provider.ensure_node_group(CLUSTER, NodeGroupSpec("gpu", get_gpu("t4"), 1, 1))
        write_kubeconfig(provider.kubeconfig(CLUSTER), kubeconfig)
        yield {"env": env, "kubeconfig": kubeconfig, "specs": specs, "old": old.path, "new": find_tool("helm")}
    finally:
        assert run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes", env=env).returncode == 0


def test_a_helm3_release_upgrades_under_the_helm4_pin_and_rolls_back(cluster: dict[str, Any]) -> None:
    env, old, new = cluster["env"], cluster["old"], cluster["new"]
    assert helm(old, env, "version", "--short").startswith(OLD_HELM)
    assert helm(new, env, "version", "--short").startswith(HELM_VERSION) and HELM_VERSION.startswith("v4.")
    old_values = rendered_values(cluster["specs"]["old"], env)
    new_values = rendered_values(cluster["specs"]["new"], env)
    assert old_values != new_values, "the two specs must give NFD different values, or apply upgrades nothing"

    # The earlier gpuctl installs NFD with Helm 3.
    install_as_gpuctl_did(old, cluster["kubeconfig"], old_values)
    crds = chart_crds()
    assert len(crds) == 3, crds  # NodeFeature, NodeFeatureGroup, NodeFeatureRule
    uids = {name: kubectl_json(env, "get", "crd", name)["metadata"]["uid"] for name in sorted(crds)}
    assert [(r["revision"], r["status"]) for r in json.loads(helm(old, env, "history", NFD, "-n", NAMESPACE,
                                                                    "-o", "json"))] == [(1, "deployed")]

    # gpuctl today (the Helm 4 pin) upgrades it in place and installs the operator new.
    steps = apply(cluster["specs"]["new"], env)
    assert steps.get("install-nfd") == "updated" and steps.get("install-gpu-operator") == "created", steps
    history = json.loads(helm(new, env, "history", NFD, "-n", NAMESPACE, "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history] == [(1, "superseded"), (2, "deployed")]
    assert json.loads(helm(new, env, "get", "values", NFD, "-n", NAMESPACE, "-o", "json")) == new_values
    assert json.loads(helm(new, env, "get", "values", NFD, "-n", NAMESPACE, "--revision", "1",
                           "-o", "json")) == old_values
    # The chart's CRDs are the ones Helm 3 installed, not made again.
    assert {name: kubectl_json(env, "get", "crd", name)["metadata"]["uid"] for name in sorted(crds)} == uids
    # Client-side apply kept for the Helm 3 release; server-side for the release Helm 4 installed.
    method = {r: json.loads(helm(new, env, "get", "metadata", r, "-n", NAMESPACE, "-o", "json")).get("applyMethod")
              for r in (NFD, "gpu-operator")}
    assert method == {NFD: "csa", "gpu-operator": "ssa"}, method
    master = deployment(env, "app.kubernetes.io/name=node-feature-discovery,role=master")
    operator = deployment(env, "app.kubernetes.io/component=gpu-operator")
    writes = {name: {f["operation"] for f in d["metadata"]["managedFields"] if f["manager"] == "helm"}
              for name, d in ((NFD, master), ("gpu-operator", operator))}
    assert writes == {NFD: {"Update"}, "gpu-operator": {"Apply"}}, writes
    # apply returned with the release's workloads ready (Helm 4's --wait), nothing awaited here.
    assert master["status"].get("readyReplicas") == master["spec"]["replicas"], master["status"]

    # The user rolls back with the new pin to the Helm 3 revision, and gets its values.
    helm(new, env, "rollback", NFD, "1", "-n", NAMESPACE, "--wait")
    history = json.loads(helm(new, env, "history", NFD, "-n", NAMESPACE, "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history] == [(1, "superseded"), (2, "superseded"),
                                                                (3, "deployed")]
    assert json.loads(helm(new, env, "get", "values", NFD, "-n", NAMESPACE, "-o", "json")) == old_values

    # Either major reads every release: Helm 3 the Helm 4 revisions and the release Helm 4 installed.
    for binary in (old, new):
        listed = {(r["name"], r["revision"], r["status"]) for r in json.loads(helm(binary, env, "list", "-n", NAMESPACE,
                                                                                  "-o", "json"))}
        assert listed == {(NFD, "3", "deployed"), ("gpu-operator", "1", "deployed")}, (binary, listed)
        revisions = [r["revision"] for r in json.loads(helm(binary, env, "history", NFD, "-n", NAMESPACE,
                                                            "-o", "json"))]
        assert revisions == [1, 2, 3], (binary, revisions)

    # apply converges the rolled-back release again, then has nothing to do.
    assert apply(cluster["specs"]["new"], env).get("install-nfd") == "updated"
    assert json.loads(helm(new, env, "get", "values", NFD, "-n", NAMESPACE, "-o", "json")) == new_values
    again = apply(cluster["specs"]["new"], env)
    assert set(again.values()) <= {"no change", "passed"}, again

    # Helm 3 rolls back too, to a revision Helm 4 wrote.
    helm(old, env, "rollback", NFD, "3", "-n", NAMESPACE, "--wait")
    history = json.loads(helm(new, env, "history", NFD, "-n", NAMESPACE, "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history][-2:] == [(4, "superseded"), (5, "deployed")], history
    assert json.loads(helm(new, env, "get", "values", NFD, "-n", NAMESPACE, "-o", "json")) == old_values


def test_helm3_rolls_back_a_release_helm4_installed_server_side(cluster: dict[str, Any]) -> None:
    """The GPU Operator's release, installed by gpuctl's Helm 4 (server-side apply) in the test before: the old
    spec's second taint upgrades it (revision 2, still server-side); Helm 3 rolls it back to revision 1 with its
    client-side patch over the fields Helm 4 applied; gpuctl's next apply upgrades it again under Helm 4 and then
    has nothing to do."""
    env, old, new = cluster["env"], cluster["old"], cluster["new"]
    release = "gpu-operator"

    def values() -> Any:
        return json.loads(helm(new, env, "get", "values", release, "-n", NAMESPACE, "-o", "json"))

    first = values()
    assert apply(cluster["specs"]["old"], env).get("install-gpu-operator") == "updated"
    upgraded = values()
    assert upgraded != first
    assert json.loads(helm(new, env, "get", "metadata", release, "-n", NAMESPACE, "-o", "json")).get(
        "applyMethod") == "ssa"

    helm(old, env, "rollback", release, "1", "-n", NAMESPACE, "--wait")
    history = json.loads(helm(old, env, "history", release, "-n", NAMESPACE, "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history] == [(1, "superseded"), (2, "superseded"),
                                                                (3, "deployed")], history
    assert values() == first
    operator = deployment(env, "app.kubernetes.io/component=gpu-operator")
    assert operator["status"].get("readyReplicas") == operator["spec"]["replicas"], operator["status"]

    assert apply(cluster["specs"]["old"], env).get("install-gpu-operator") == "updated"
    assert values() == upgraded
    again = apply(cluster["specs"]["old"], env)
    assert set(again.values()) <= {"no change", "passed"}, again
