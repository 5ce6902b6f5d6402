"""Kueue's Helm release (stack/kueue.py) and the `kueue` spec field."""

from __future__ import annotations

import pytest
import yaml

from gpuctl.providers import capabilities_of
from gpuctl.stack.kueue import kueue_release, manager_config
from gpuctl.util.errors import UsageError
from tests.conftest import run_gpuctl


def test_upstream_is_kueues_oci_chart_at_the_pinned_version() -> None:
    release = kueue_release("upstream")
    assert (release.name, release.namespace) == ("kueue", "kueue-system")
    assert (release.chart.ref, release.chart.repo, release.chart.version) == (
        "oci://registry.k8s.io/kueue/charts/kueue", None, "0.19.2")
    mirror = kueue_release("oci://mirror.example/charts/").chart
    assert (mirror.ref, mirror.version) == ("oci://mirror.example/charts/kueue", "0.19.2")


def test_a_directory_without_kueue_is_refused_naming_the_field(tmp_path) -> None:
    with pytest.raises(UsageError) as refused:
        kueue_release(str(tmp_path), "spec.gpuOperator.charts")
    assert refused.value.field == "spec.gpuOperator.charts" and "kueue/Chart.yaml" in refused.value.message


def test_the_manager_checks_quota_only_for_covered_resources() -> None:
    values = kueue_release("upstream").values
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config == manager_config()
    assert config["resources"]["quotaCheckStrategy"] == "IgnoreUndeclared"
    assert "batch/job" in config["integrations"]["frameworks"]


def test_kueue_on_a_cloud_with_bundled_charts_is_refused() -> None:
    proc = run_gpuctl("cluster", "create", "--cloud", "eks", "--name", "c", "--gpu", "t4", "--kueue",
                      "--charts", "bundled", "--export-spec")
    assert proc.returncode == 2 and "spec.kueue.enabled" not in proc.stdout
    assert "--kueue: there is no bundled Kueue chart" in proc.stderr, proc.stderr


def test_kueue_round_trips_through_the_spec() -> None:
    proc = run_gpuctl("cluster", "create", "--cloud", "sim", "--name", "c", "--gpu", "t4", "--kueue", "--export-spec")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["spec"]["kueue"] == {"enabled": True}


@pytest.mark.parametrize(("cloud", "chart"), [("sim", False), ("eks", True), ("openstack", True)])
def test_kueue_comes_from_its_chart_unless_the_provider_runs_it(cloud: str, chart: bool) -> None:
    """One rule (Capabilities.kueue_chart) for the spec's check, `render` and apply's install-kueue step: the sim
    runs Kueue's CRDs and controller itself; a cloud gets Kueue's chart; no spec asking for no Kueue gets one."""
    assert capabilities_of(cloud).kueue_chart(True) is chart
    assert capabilities_of(cloud).kueue_chart(False) is False
