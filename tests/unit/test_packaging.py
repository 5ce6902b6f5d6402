"""A regular wheel install (not only an editable one) carries templates/ and nodepools/."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # builds a wheel with pip
def test_wheel_ships_data_and_finds_it(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("gpuctl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuctl/_data/templates/sim/kwokctl.yaml.j2" in names
    assert "gpuctl/_data/templates/charts/gpu-operator/Chart.yaml" in names
    assert "gpuctl/_data/templates/charts/node-feature-discovery/templates/nfd.yaml" in names
    assert any(n.startswith("gpuctl/_data/nodepools/") for n in names)

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("from gpuctl.util.resources import data_dir; from gpuctl.util.templating import render_template; "
             "print(data_dir('templates')); print(data_dir('nodepools'))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(site / "gpuctl" / "_data" / "templates"), str(site / "gpuctl" / "_data" / "nodepools")]
