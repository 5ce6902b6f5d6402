"""What gpuctl sends Magnum and how it reads node groups back, without a cloud."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.model.catalog import get_gpu
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.providers.openstack.nodegroups import (
    auto_healing,
    bounds_of,
    cluster_body,
    gpu_for_flavor,
    is_default,
    is_managed,
    node_attr_changes,
    nodegroup_body,
    nodegroup_info,
    widened,
)
from gpuctl.providers.openstack.provider import MagnumProvider


@pytest.fixture(autouse=True)
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "site.yaml"
    monkeypatch.setenv("GPUCTL_SITE_CONFIG", str(path))
    return path


def test_flavor_maps_back_to_its_gpu() -> None:
    assert gpu_for_flavor("g2.5xlarge") == get_gpu("t4")
    assert gpu_for_flavor("m1.large") is None


def test_site_flavors_map_back_too(site: Path) -> None:
    site.write_text("openstack:\n  flavors: {t4: site.t4.large}\n")  # before the first read: it is cached
    assert gpu_for_flavor("site.t4.large") == get_gpu("t4")
    assert gpu_for_flavor("g2.5xlarge") is None  # the site replaced the default


def test_cluster_body_labels_gpu_and_ownership_and_merges() -> None:
    body = cluster_body("os1", "gpu-template", CloudOptions())
    assert body["cluster_template_id"] == "gpu-template" and body["merge_labels"] is True
    assert body["labels"] == {"nvidia_gpu_enabled": "true", "gpuctl_managed": "true",
                              "auto_healing_enabled": "true", "auto_healing_controller": "magnum-auto-healer"}
    assert "keypair" not in body
    assert cluster_body("os1", "t", CloudOptions(keypair="ops"))["keypair"] == "ops"


def test_no_node_repair_creates_the_cluster_with_auto_healing_off() -> None:
    labels = cluster_body("os1", "t", CloudOptions(no_node_repair=True))["labels"]
    assert labels["auto_healing_enabled"] == "false" and "auto_healing_controller" not in labels
    assert auto_healing(labels)[0] is False  # (the Cluster API driver's default, true, would hold were it unset)


def test_the_sites_labels_win_over_gpuctls_auto_healing(site: Path) -> None:
    site.write_text("openstack:\n  labels: {auto_healing_enabled: 'false', nvidia_gpu_enabled: 'true'}\n")
    assert auto_healing(cluster_body("os1", "t", CloudOptions())["labels"])[0] is False  # (read once: cached)


@pytest.mark.parametrize(("labels", "on", "said"), [
    ({"auto_healing_enabled": "true", "auto_healing_controller": "magnum-auto-healer"}, True, "magnum-auto-healer"),
    ({"auto_healing_enabled": "True"}, True, "controller draino"),  # Magnum's documented default controller
    ({"auto_healing_enabled": "false"}, False, "auto_healing_enabled=false"),
    ({}, False, "on with the Cluster API driver (its default), off with the Heat driver"),
])
def test_auto_healing_as_the_cluster_labels_say(labels: dict[str, str], on: bool, said: str) -> None:
    assert auto_healing(labels)[0] is on and said in auto_healing(labels)[1]


def test_nodegroup_body() -> None:
    spec = NodeGroupSpec("gpu", get_gpu("a100-40gb"), 2, 8)
    body = nodegroup_body(spec, "g4.a100", 1, 4, with_node_attrs=False)
    assert body == {"name": "gpu", "flavor_id": "g4.a100", "node_count": 2, "min_node_count": 1,
                    "max_node_count": 4, "role": "worker", "merge_labels": True,
                    "labels": {"nvidia_gpu_enabled": "true", "gpuctl_managed": "true", "gpuctl_gpu": "a100-40gb",
                               "gpuctl_gpus_per_node": "8"}}
    # Microversion 1.14: Magnum sets node labels and taints itself (in nodegroup._validate_node_taints's format)
    attrs = nodegroup_body(spec, "g4.a100", 1, 4, with_node_attrs=True)
    assert attrs == {**body, "node_labels": {"gpuctl.dev/gpu": "a100-40gb", "gpuctl.dev/gpus-per-node": "8"},
                     "node_taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}
    assert node_attr_changes({**attrs, "node_taints": [{"key": "nvidia.com/gpu", "value": "true",
                                                        "effect": "NoSchedule"}]}, spec) == {}
    assert set(node_attr_changes(body, spec)) == {"node_labels", "node_taints"}


def test_nodegroup_info_prefers_gpuctl_labels_then_the_flavor() -> None:
    record = {"name": "gpu", "flavor_id": "custom.flavor", "node_count": 3, "status": "UPDATE_COMPLETE",
              "labels": {"gpuctl_gpu": "l4", "gpuctl_gpus_per_node": "2"}}
    info = nodegroup_info("os1", record)
    assert (info.gpu, info.nodes, info.ready_nodes, info.gpus_per_node) == ("l4", 3, 3, 2)
    adopted = nodegroup_info("os1", {"name": "x", "flavor_id": "g2.5xlarge", "node_count": 2,
                                     "status": "CREATE_IN_PROGRESS", "labels": {}})
    assert (adopted.gpu, adopted.ready_nodes, adopted.gpus_per_node) == ("t4", 0, 1)
    cpu = nodegroup_info("os1", {"name": "y", "flavor_id": "m1.large", "node_count": 1, "status": "CREATE_COMPLETE"})
    assert (cpu.gpu, cpu.gpus_per_node) == ("none (m1.large)", 0)


def test_defaults_and_ownership() -> None:
    assert is_default({"is_default": True, "role": "worker"}) and is_default({"role": "master"})
    assert not is_default({"is_default": False, "role": "worker"})
    assert is_managed({"labels": {"gpuctl_managed": "true"}}) and not is_managed({"labels": None})


def test_bounds_widen_to_hold_both() -> None:
    assert widened((2, 2), (4, 4)) == (2, 4)
    assert widened((1, 10), (3, 3)) == (1, 10)
    assert widened((0, None), (2, 2)) == (0, None)


def test_a_maximum_of_0_or_null_is_no_maximum() -> None:
    assert bounds_of({"min_node_count": 1, "max_node_count": 0}) == (1, None)
    assert bounds_of({"min_node_count": None, "max_node_count": None}) == (0, None)


def test_names_in_kubeconfig_and_selector() -> None:
    provider = MagnumProvider(CloudOptions())
    assert provider.context_name("os1") == "gpuctl-openstack-os1"
    assert provider.node_selector("gpu") == "magnum.openstack.org/nodegroup=gpu"
    assert (provider.cloud, provider.capabilities.default_charts, provider.capabilities.ships_driver) == \
        ("openstack", "upstream", True)


def test_provider_imports_openstacksdk_only_when_it_connects() -> None:
    code = ("import sys; from gpuctl.providers import get_provider; get_provider('openstack'); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'openstack', 'keystoneauth1'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr
