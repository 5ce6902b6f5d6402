"""`gpuctl --help` and `--version` must not pay for the cloud SDKs or the Kubernetes client."""

import subprocess
import sys

HEAVY = ("boto3", "botocore", "openstack", "kubernetes", "pyhelm3")

PROBE = """
import sys
from gpuctl.cli.main import run
code = run({args!r})
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def _heavy_after(args: list[str]) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def test_import_of_cli_is_light() -> None:
    proc = subprocess.run([sys.executable, "-c", "import sys, gpuctl.cli.main; "
                           f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_help_and_version_are_light() -> None:
    for args in (["--help"], ["--version"], ["cluster", "--help"], ["cluster", "create", "--help"],
                 ["nodegroup", "add", "--help"], ["gpus"]):
        assert _heavy_after(args) == "HEAVY=", args


ENTRY_PROBE = """
import sys
sys.argv = ["gpuctl", "--help"]
from gpuctl.cli import entry
try:
    entry.main()
except SystemExit as exit:
    assert exit.code == 0
print("TYPER=" + str("typer" in sys.modules), file=sys.stderr)
"""


def test_root_help_is_rendered_by_typer_once_then_served_without_it(tmp_path) -> None:  # noqa: ANN001
    import os

    env = dict(os.environ, GPUCTL_CACHE_DIR=str(tmp_path), COLUMNS="80")
    runs = [subprocess.run([sys.executable, "-c", ENTRY_PROBE], capture_output=True, text=True, env=env,
                           timeout=60) for _ in range(2)]
    assert [r.stderr.strip() for r in runs] == ["TYPER=True", "TYPER=False"]
    assert runs[0].stdout == runs[1].stdout
    assert "cluster" in runs[1].stdout and "--kubeconfig" in runs[1].stdout
    typer_help = subprocess.run([sys.executable, "-c", "from gpuctl.cli.main import run; run(['--help'])"],
                                capture_output=True, text=True, env=env, timeout=60).stdout
    assert runs[1].stdout == typer_help


def test_the_python_api_is_import_gpuctl() -> None:
    import gpuctl
    import gpuctl.api

    assert gpuctl._API == set(gpuctl.api.__all__)
    assert gpuctl.apply_platform is gpuctl.api.apply_platform
