"""Hostile flags, spec files and kubeconfigs: each exits 2 with one short line naming the flag or field,
fast, with no traceback and before anything is started, installed or written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

GOOD = Path(__file__).resolve().parents[1] / "specs" / "good.yaml"
MAX_LINE = 400  # an error quotes a short prefix of a value, never the value
BIG = "a" * 100_000  # argv allows 128 KiB per argument


def assert_refused(proc, expected: str, isolated_env: dict[str, str], started: float) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0][:MAX_LINE]
    assert len(lines[0]) <= MAX_LINE, lines[0][:MAX_LINE]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert time.monotonic() - started < 10
    for made in ("state", "cache"):
        assert not Path(isolated_env[f"GPUCTL_{made.upper()}_DIR"]).exists()


CREATE = ["cluster", "create", "--cloud", "sim", "--gpu", "t4"]
FLAGS = [
    (CREATE + ["--name", "demo\n"], "--name: 'demo\\n' is not a valid name"),
    (CREATE + ["--nodegroup-name", "gpu\n"], "--nodegroup-name: 'gpu\\n' is not a valid name"),
    (CREATE + ["--name", BIG], "--name: 'aaaa"),
    (CREATE + ["--taint", "a=b:NoSchedule\n"], "--taint:"),
    (CREATE + ["--taint", "a=b:NoSchedule", "--taint", "a=c:NoSchedule"], "--taint: duplicate taint a:NoSchedule"),
    (CREATE + ["--taint", "x" * 70 + "=v:NoSchedule"], "--taint: invalid key"),
    (CREATE + ["--nodes", "٣"], "error: --nodes: "),
    (CREATE + ["--nodes", "1_000"], "error: --nodes: "),
    (CREATE + ["--nodes", "5001"], "--nodes: must be at most 5000"),
    (CREATE + ["--gpus-per-node", "²"], "error: --gpus-per-node: "),
    (CREATE + ["--slices", "1e3"], "error: --slices: "),
    (CREATE + ["--slices", "65"], "--slices: must be between 2 and 64"),
    (CREATE + ["--sharing", "mps", "--slices", "49"], "--slices: mps on t4 takes at most 48"),
    (CREATE + ["--charts", "dir\x1b[31m"], "--charts: 'dir\\x1b[31m' is not accepted"),
    (CREATE + ["--smoke-image", "img\n"], "--smoke-image:"),
    (CREATE + ["--min-nodes", "3"], "--min-nodes: must be between 0 and nodes (1), got 3"),
    (CREATE + ["--context", "ctx\n"], "--context:"),
    (["validate", "--timeout", "nan"], "error: --timeout: "),
    (["validate", "--timeout", "-1"], "error: --timeout: "),
    (["apply", "-f", str(GOOD), "--lock-timeout", "inf"], "error: --lock-timeout: "),
    (["mig", "validate", "3g.20gb\n", "--gpu", "a100-40gb"], "is not a MIG layout"),
    (["mig", "validate", "٣x1g.5gb", "--gpu", "a100-40gb"], "is not a MIG layout"),
    (["mig", "validate", "²x1g.5gb", "--gpu", "a100-40gb"], "is not a MIG layout"),
    (["mig", "validate", BIG, "--gpu", "a100-40gb"], "is not a MIG layout"),
    (["tenant", "add", "gpu-operator", "--gpus", "0"], "NAME: 'gpu-operator' is a system namespace"),
    (["tenant", "add", "kube-system"], "NAME: 'kube-system' is a system namespace"),
    (["tenant", "remove", "kube-system", "--yes"], "NAME: 'kube-system' is a system namespace"),
    (["tenant", "add", "team-a\n"], "NAME: 'team-a\\n' is not a valid name"),
    (["tenant", "add", "team-a", "--group", "system:masters"], "--group: 'system:masters' is a Kubernetes system group"),
    (["tenant", "add", "team-a", "--mig", "3g.20gb=٣"], "--mig: '٣' is not a whole number"),
    (["tenant", "add", "team-a", "--mig", "3g.20gb\n=2"], "--mig:"),
    (["tenant", "add", "team-a", "--gpus", "100001"], "--gpus: must be at most 100000"),
    (["nodegroup", "add", "--cluster", "demo", "--name", "ng", "--gpu", "t4", "--taint", "k:Bad"], "--taint:"),
    (["nodegroup", "add", "--cluster", "../x", "--name", "ng", "--gpu", "t4"], "--cluster: '../x' is not a valid name"),
    (["cluster", "delete", "--name", "../../etc", "--yes"], "--name: '../../etc' is not a valid name"),
    (["cluster", "list", "--cloud", "openstack", "--region", "r\n"], "--region:"),
]


@pytest.mark.parametrize("args,expected", FLAGS, ids=[repr(a[:6])[:60] for a, _ in FLAGS])
@pytest.mark.slow  # gpuctl processes, one a case
def test_hostile_flags(args: list[str], expected: str, isolated_env: dict[str, str]) -> None:
    started = time.monotonic()
    assert_refused(run_gpuctl(*args, env=isolated_env), expected, isolated_env, started)


def spec_text(**replace: str) -> str:
    text = GOOD.read_text()
    for old, new in replace.items():
        assert old.replace("_", " ") in text or old in text
        text = text.replace(old, new)
    return text


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(20))
SPECS = [
    ("alias bomb", ALIAS_BOMB.encode(), "aliases (*name) are not accepted"),
    ("deep nesting", ("a: " + "[" * 10_000 + "]" * 10_000 + "\n").encode(), "nesting deeper than 32 levels"),
    ("duplicate key", b"apiVersion: gpuctl.dev/v1alpha1\napiVersion: x\n", "duplicate key 'apiVersion'"),
    ("latin-1", "metadata: {name: d\xe9mo}\n".encode("latin-1"), "is not UTF-8"),
    ("oversized", b"# " + b"x" * (2 << 20) + b"\n", "is larger than 1024 KiB"),
    ("name with newline", spec_text(**{"name: platform": 'name: "platform\\n"'}).encode(),
     "metadata.name: 'platform\\n' is not a valid name"),
    ("huge name", spec_text(**{"name: platform": f"name: {BIG}"}).encode(), "metadata.name: 'aaaa"),
    ("label newline", spec_text(**{"workload: inference": 'workload: "inference\\n"'}).encode(),
     "spec.nodeGroups[0].labels.workload: invalid value"),
    ("duplicate taints", spec_text(**{'"dedicated=training:NoSchedule"': '"nvidia.com/gpu=false:NoSchedule"'}).encode(),
     "spec.nodeGroups[1].taints[1]: duplicate taint nvidia.com/gpu:NoSchedule"),
    ("layout newline", spec_text(**{"layout: 3g.20gb-2x2g.10gb": 'layout: "3g.20gb-2x2g.10gb\\n"'}).encode(),
     "spec.nodeGroups[1].sharing.mig.layout:"),
    ("hex count", spec_text(**{"nodes: 2": "nodes: 0x10"}).encode(), "spec.nodeGroups[0].nodes: must be an integer"),
    ("octal count", spec_text(**{"nodes: 2": "nodes: 017"}).encode(), "spec.nodeGroups[0].nodes: must be an integer"),
    ("huge count", spec_text(**{"nodes: 2": "nodes: 99999999999999999999"}).encode(),
     "spec.nodeGroups[0].nodes: must be at most 5000"),
    ("inf count", spec_text(**{"nodes: 2": "nodes: .inf"}).encode(), "spec.nodeGroups[0].nodes: must be an integer"),
    ("yes is not a boolean", spec_text(**{"migStrategy: mixed": "migStrategy: mixed\n    validate: yes"}).encode(),
     "spec.gpuOperator.validate: must be a boolean"),
    ("system tenant", spec_text(**{"name: team-b": "name: kube-system"}).encode(),
     "spec.tenants[1].name: 'kube-system' is a system namespace"),
    ("system group", spec_text(**{"group: team-a-devs": "group: system:masters"}).encode(),
     "spec.tenants[0].group: 'system:masters' is a Kubernetes system group"),
    ("control characters", spec_text(**{"migStrategy: mixed": 'migStrategy: mixed\n    smokeImage: "a\\x07b"'}).encode(),
     "spec.gpuOperator.smokeImage:"),
    ("two documents", GOOD.read_bytes() + b"---\n" + GOOD.read_bytes(), "expected a single document"),
]


@pytest.mark.parametrize("command", ["render", "apply"])
@pytest.mark.parametrize("name,content,expected", SPECS, ids=[s[0] for s in SPECS])
@pytest.mark.slow  # gpuctl processes, one a case
def test_hostile_spec_files(command: str, name: str, content: bytes, expected: str, isolated_env: dict[str, str],
                            tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(content)
    started = time.monotonic()
    assert_refused(run_gpuctl(command, "-f", str(spec), env=isolated_env), expected, isolated_env, started)


@pytest.mark.slow  # gpuctl processes
def test_special_files_are_refused_without_reading_them(isolated_env: dict[str, str], tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path, expected in (("/dev/zero", "is not a regular file"), (str(fifo), "is not a regular file"),
                           (str(tmp_path), "is not a regular file")):
        started = time.monotonic()
        assert_refused(run_gpuctl("render", "-f", path, env=isolated_env, timeout=20), expected, isolated_env,
                       started)


KUBECONFIGS = [
    ("alias bomb", ALIAS_BOMB.encode(), "aliases (*name) are not accepted"),
    ("not a mapping", b"- a\n- b\n", "is not a kubeconfig"),
    ("bad contexts", b"contexts: 5\n", "contexts must be a list of named entries"),
    ("latin-1", b"current-context: d\xe9mo\n", "is not UTF-8"),
    ("broken yaml", b"clusters: [\n", "--kubeconfig:"),
]


@pytest.mark.parametrize("name,content,expected", KUBECONFIGS, ids=[k[0] for k in KUBECONFIGS])
@pytest.mark.slow  # gpuctl processes, one a case
def test_hostile_kubeconfigs(name: str, content: bytes, expected: str, isolated_env: dict[str, str],
                             tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(content)
    before = kubeconfig.read_bytes()
    for args in (["--kubeconfig", str(kubeconfig), *CREATE], ["--kubeconfig", str(kubeconfig), "status"],
                 ["--kubeconfig", str(kubeconfig), "tenant", "list"]):
        started = time.monotonic()
        assert_refused(run_gpuctl(*args, env=isolated_env), expected, isolated_env, started)
    assert kubeconfig.read_bytes() == before  # never rewritten


def test_unwritable_kubeconfig_is_found_before_the_cluster_starts(isolated_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    started = time.monotonic()
    proc = run_gpuctl("--kubeconfig", str(blocker / "sub" / "config"), *CREATE, env=isolated_env)
    assert_refused(proc, "--kubeconfig: cannot write", isolated_env, started)
