"""`gpuctl plan` names every step `gpuctl apply` runs, in its order: before the cluster exists and on the
converged cluster, for every sim spec file under tests/ (one step list, gpuctl/ops/platform/steps.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.integration.conftest import PLATFORM_SPEC, Platform

pytestmark = pytest.mark.integration
TESTS = Path(__file__).resolve().parents[1]


def _sim_specs() -> list[Path]:
    """The spec files under tests/specs that target the sim (a deliberately invalid one is not applied)."""
    from gpuctl.api import load_spec
    from tests.support.util import GpuctlError

    found = []
    for path in sorted((TESTS / "specs").glob("*.yaml")):
        try:
            doc, _ = load_spec(path)
        except GpuctlError:
            continue
        if doc.cloud == "sim":
            found.append(path)
    return found


def _json(env: dict[str, str], *args: str) -> Any:
    proc = run_gpuctl("-o", "json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _is_the_platform(spec: Path) -> bool:
    """The spec is the README's (the session's `platform` cluster applied it first)."""
    from gpuctl.api import load_spec

    return load_spec(spec)[0] == load_spec(PLATFORM_SPEC)[0]


@pytest.mark.parametrize("spec", _sim_specs(), ids=lambda p: p.name)
def test_plan_names_the_steps_apply_runs(spec: Path, sim_env: dict[str, str], tmp_path: Path,
                                         request: pytest.FixtureRequest) -> None:
    """A spec that is the README's is checked on the session's `platform` cluster: its plan before that cluster
    existed (for another file of the same document, a plan in an empty state dir), the steps its first apply ran,
    and its plan there now; the hand edit is undone and plan says so. Any other spec gets a cluster of its own."""
    if _is_the_platform(spec):
        platform: Platform = request.getfixturevalue("platform")
        empty = dict(sim_env, GPUCTL_STATE_DIR=str(tmp_path / "state"), KUBECONFIG=str(tmp_path / "kubeconfig"))
        before = platform.first_plan if spec == PLATFORM_SPEC else _json(empty, "plan", "-f", str(spec))
        _plan_names_the_steps(platform.env, spec, before, platform.first_run, platform.first_run_s)
        return
    name = f"plan-{spec.stem}"[:40]  # a cluster of its own, whatever else the session runs
    doc = yaml.safe_load(spec.read_text())
    doc["metadata"]["name"] = name
    path = tmp_path / spec.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = dict(sim_env, KUBECONFIG=str(tmp_path / "kubeconfig"))
    try:
        before = _json(env, "plan", "-f", str(path))
        started = time.monotonic()
        applied = _json(env, "apply", "-f", str(path))
        _plan_names_the_steps(env, path, before, applied, time.monotonic() - started)
    finally:
        proc = run_gpuctl("cluster", "delete", "--cloud", "sim", "--name", name, "--yes", env=env)
        assert proc.returncode == 0 or "not found" in proc.stderr, proc.stderr


def _plan_names_the_steps(env: dict[str, str], path: Path, before: Any, applied: Any, took: float) -> None:
    """`before` (plan before the cluster existed) and plan now name the steps the first apply (`applied`) ran; a hand
    edit of the device-plugin configs shows in plan as the config write and the restart, plan writes nothing back,
    and once the edit is undone plan finds nothing to do."""
    ran = [s["step"] for s in applied["steps"]]
    after = _json(env, "plan", "-f", str(path))
    assert [p["step"] for p in before] == ran
    assert [p["step"] for p in after] == ran
    cluster_side = before[ran.index("write-kubeconfig") + 1:]
    assert {(p["action"], p["detail"]) for p in cluster_side} <= {
        ("created", "once the cluster exists"), ("check", "once the cluster exists")}
    changing = [p for p in after if p["action"] != "no change"]
    assert not changing, changing  # converged and validated
    print(f"\n{path.name}: {len(ran)} steps; apply {took:.1f}s")
    edited = _edit_plugin_configs(env)
    assert edited == _shared_keys(path), edited  # every sharing config the spec asks for, none unedited
    try:
        if edited:  # a spec that shares no GPU has no device-plugin config to edit
            steps = {p["step"]: p for p in _json(env, "plan", "-f", str(path))}
            assert [steps["write-gpu-config"]["action"], steps["restart-device-plugin"]["action"]] == ["updated"] * 2
            assert all(k in steps["restart-device-plugin"]["detail"] for k in edited)
            assert {steps[n]["action"] for n in ran if n.startswith(("wait-capacity/", "validate/"))} == {"check"}
            assert _edit_plugin_configs(env, edit=False) == edited  # plan wrote nothing back
    finally:
        _edit_plugin_configs(env, undo=True)
    assert {p["action"] for p in _json(env, "plan", "-f", str(path))} == {"no change"}  # as the first apply left it


def _shared_keys(path: Path) -> list[str]:
    """The device-plugin config keys the spec file's sharing asks for, read from the file itself
    (timeSlicing replicas N: slice-N, mps replicas N: mps-N)."""
    prefix = {"timeSlicing": "slice", "mps": "mps"}
    groups = yaml.safe_load(path.read_text())["spec"]["nodeGroups"]
    return sorted({f"{prefix[kind]}-{how['replicas']}" for g in groups
                   for kind, how in (g.get("sharing") or {}).items() if kind in prefix})


def _edit_plugin_configs(env: dict[str, str], edit: bool = True, undo: bool = False) -> list[str]:
    """The device-plugin configs in use (every key but the default one), edited by hand when `edit` (the edit
    taken off again when `undo`); the keys that hold such an edit."""
    from kubernetes import client, config

    from tests.support.model import DEFAULT_CONFIG_KEY
    from tests.support.stack import DEVICE_PLUGIN_CONFIGMAP
    from tests.support.stack import OPERATOR_NAMESPACE as NAMESPACE

    v1 = client.CoreV1Api(config.new_client_from_config(env["KUBECONFIG"]))
    data = v1.read_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, NAMESPACE).data or {}
    keys = sorted(k for k in data if k != DEFAULT_CONFIG_KEY)
    if undo:
        mark = "# edited by hand\n"
        v1.patch_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, NAMESPACE,
                                       {"data": {k: data[k].removesuffix(mark) for k in keys if data[k].endswith(mark)}})
        return []
    if edit and keys:
        v1.patch_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, NAMESPACE,
                                       {"data": {k: data[k] + "# edited by hand\n" for k in keys}})
    return [k for k in keys if edit or data[k].endswith("# edited by hand\n")]
