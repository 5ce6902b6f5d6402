"""DRA mode on the stack side: the `dra` spec field and its flags, the DRA driver's Helm release, the
operator's device plugin off, and the combinations refused before anything is touched."""

from __future__ import annotations

import pytest
import yaml

from gpuctl.model.dra import check_dra_kubernetes
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint
from gpuctl.stack.dra_driver import NAMESPACE, RELEASE, dra_release, dra_values
from gpuctl.stack.values import cluster_policy_fields, operator_values
from gpuctl.util.errors import UsageError
from tests.conftest import run_gpuctl


def create(*flags: str) -> tuple[int, str, str]:
    proc = run_gpuctl("cluster", "create", "--name", "c", "--gpu", "a100-40gb", *flags, "--export-spec")
    return proc.returncode, proc.stdout, proc.stderr


def test_upstream_chart_is_the_drivers_oci_chart_at_the_pinned_version() -> None:
    release = dra_release(StackSpec(charts="upstream", dra=True))
    assert (release.name, release.namespace) == (RELEASE, NAMESPACE) == ("dra-driver-nvidia-gpu",) * 2
    assert (release.chart.ref, release.chart.version) == (
        "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu", "0.4.1")
    assert dra_release(StackSpec(charts="bundled", dra=True)).chart.ref.endswith("templates/charts/dra-driver-nvidia-gpu")


def test_values_follow_the_stack() -> None:
    host = dra_values(StackSpec(charts="upstream", dra=True, taints=DEFAULT_GPU_TAINTS))
    assert host["gpuResourcesEnabledOverride"] is True
    assert host["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    assert host["nvidiaDriverRoot"] == "/"
    # the driver's NVML health check, which taints a failing GPU's device (what doctor reads in DRA mode)
    assert host["featureGates"] == {"NVMLDeviceHealthCheck": True}
    # the chart's own toleration stays; gpuctl's taints are added once
    extra = Taint("dedicated", "gpu", "NoSchedule")
    operated = dra_values(StackSpec(charts="upstream", driver=True, dra=True, dra_alpha_sharing=True,
                                    taints=(*DEFAULT_GPU_TAINTS, extra)))
    assert operated["nvidiaDriverRoot"] == "/run/nvidia/driver"
    tolerations = operated["kubeletPlugin"]["tolerations"]
    assert tolerations[0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert extra.toleration() in tolerations and len(tolerations) == len({yaml.safe_dump(t) for t in tolerations})
    assert operated["featureGates"] == {"NVMLDeviceHealthCheck": True, "TimeSlicingSettings": True,
                                        "MPSSupport": True}


def test_the_operators_device_plugin_is_off_in_dra_mode_only() -> None:
    assert "enabled" not in operator_values(StackSpec(charts="upstream"))["devicePlugin"]
    assert operator_values(StackSpec(charts="upstream", dra=True))["devicePlugin"]["enabled"] is False
    # and in the ClusterPolicy of an operator someone else installed
    assert cluster_policy_fields(StackSpec(charts="upstream", dra=True))["devicePlugin"]["enabled"] is False
    assert "devicePlugin" not in cluster_policy_fields(StackSpec(charts="upstream"))


def test_dra_round_trips_through_the_spec() -> None:
    code, out, err = create("--cloud", "sim", "--dra")
    assert code == 0, err
    assert yaml.safe_load(out)["spec"]["dra"] == {"enabled": True}
    code, out, err = create("--cloud", "sim", "--dra", "--dra-alpha-sharing", "--slices", "4")
    assert code == 0, err
    assert yaml.safe_load(out)["spec"]["dra"] == {"enabled": True, "alphaSharing": True}
    code, out, _ = create("--cloud", "sim")
    assert "dra" not in yaml.safe_load(out)["spec"]


@pytest.mark.parametrize(("flags", "message"), [
    (("--slices", "4"), "--slices: time-slicing through DRA is alpha in dra-driver-nvidia-gpu 0.4.1 "
                        "(feature gate TimeSlicingSettings)"),
    (("--sharing", "mps", "--slices", "2"), "--slices: mps through DRA is alpha"),
])
def test_sharing_through_dra_needs_the_alpha_option(flags: tuple[str, ...], message: str) -> None:
    code, out, err = create("--cloud", "sim", "--dra", *flags)
    assert code == 2 and out == "" and message in err and "--dra-alpha-sharing" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_alpha_sharing_without_dra_and_old_kubernetes_are_refused() -> None:
    code, _, err = create("--cloud", "sim", "--dra-alpha-sharing")
    assert code == 2 and "--dra-alpha-sharing: only in DRA mode" in err
    code, _, err = create("--cloud", "eks", "--dra", "--kubernetes-version", "1.33")
    assert code == 2 and "--kubernetes-version: Kubernetes 1.33 serves no resource.k8s.io/v1" in err
    check_dra_kubernetes("1.34", "f")
    check_dra_kubernetes(None, "f")
    with pytest.raises(UsageError):
        check_dra_kubernetes("v1.30.4", "f")


def test_spec_file_keys_are_strict(tmp_path) -> None:
    doc = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "c"},
           "spec": {"provider": {"cloud": "sim"}, "nodeGroups": [{"name": "g", "gpu": "t4", "nodes": 1}],
                    "dra": {"enabled": True, "alphaSharin": True}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = run_gpuctl("plan", "-f", str(path))
    assert proc.returncode == 2 and "spec.dra.alphaSharin: unknown key; did you mean alphaSharing?" in proc.stderr


def test_render_covers_the_driver_release_and_the_tenants_claim_objects(tmp_path) -> None:
    from gpuctl.api import load_spec, to_platform
    from gpuctl.ops.render import helm_releases, manifests

    doc = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "c"},
           "spec": {"provider": {"cloud": "sim"}, "dra": {"enabled": True},
                    "nodeGroups": [{"name": "g", "gpu": "a100-40gb", "nodes": 1}],
                    "tenants": [{"name": "team-a", "gpus": 2, "mig": {"3g.20gb": 1}}]}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = to_platform(*load_spec(path))
    releases = helm_releases(spec)
    assert releases["dra-driver-nvidia-gpu"].values["gpuResourcesEnabledOverride"] is True
    assert releases["gpu-operator"].values["devicePlugin"]["enabled"] is False
    files = manifests(spec)
    assert files["21-quota-team-a.yaml"]["spec"]["hard"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2"
    templates = {f: b for f, b in files.items() if b["kind"] == "ResourceClaimTemplate"}
    assert sorted(b["metadata"]["name"] for b in templates.values()) == ["gpu-a100-40gb", "mig-3g.20gb"]
