from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuctl.model.catalog import GPUS
from gpuctl.model.site import _load, openstack_flavor
from gpuctl.util.errors import UsageError


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "site.yaml"
    monkeypatch.setenv("GPUCTL_SITE_CONFIG", str(path))
    _load.cache_clear()
    yield path
    _load.cache_clear()


def test_catalog_default_without_site_config(site: Path) -> None:
    assert openstack_flavor(GPUS["t4"]) == "g2.5xlarge"


def test_site_config_overrides_a_flavor(site: Path) -> None:
    site.write_text("openstack:\n  flavors:\n    t4: site.t4.large\n")
    assert openstack_flavor(GPUS["t4"]) == "site.t4.large"
    assert openstack_flavor(GPUS["l4"]) == GPUS["l4"].openstack_flavor


@pytest.mark.parametrize("text,field", [
    ("openstak: {}\n", "openstak"),
    ("openstack:\n  flavours: {}\n", "openstack.flavours"),
    ("openstack:\n  flavors:\n    z100: x\n", "openstack.flavors.z100"),
    ("openstack:\n  flavors:\n    t4: 3\n", "openstack.flavors.t4"),
])
def test_bad_site_config_names_the_field(site: Path, text: str, field: str) -> None:
    site.write_text(text)
    with pytest.raises(UsageError) as err:
        openstack_flavor(GPUS["t4"])
    assert f"{site}: {field}:" in err.value.one_line()


def test_openstack_labels_default_and_override(site: Path) -> None:
    from gpuctl.model.site import openstack_labels

    assert openstack_labels() == {"nvidia_gpu_enabled": "true"}
    _load.cache_clear()
    site.write_text('openstack:\n  labels: {nvidia_gpu_enabled: "true", gpu_driver: "570"}\n')
    assert openstack_labels() == {"nvidia_gpu_enabled": "true", "gpu_driver": "570"}
    _load.cache_clear()
    site.write_text("openstack:\n  labels: {nvidia_gpu_enabled: true}\n")
    with pytest.raises(UsageError, match="openstack.labels"):
        openstack_labels()
