"""Start-up time of the gpuctl commands that need no cluster, against `kubectl version --client`.

Each command runs N times (median reported), interleaved with the others and with kubectl so that
machine load affects all alike. Target (issue 9): median <= 150 ms for every command; the ratio to
kubectl is shown for comparison. Help is served from a cache that the first `--help` fills; this
bench uses a fresh cache directory, so the first-run figure includes rendering it.
Exit status 1 when a target is missed (or a command fails), unless --no-fail (CI on a shared machine).
--precompiled measures a copy of gpuctl with its bytecode compiled, as `pip install` leaves it: with
PYTHONDONTWRITEBYTECODE set, an editable checkout compiles every gpuctl module at every start.
Usage: python -m bench.startup [--runs N] [--target-ms MS] [--no-fail] [--precompiled]   (with the virtualenv's python)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import support

ROOT = support.ROOT
SPEC = ROOT / "tests" / "specs" / "good.yaml"
TARGET_MS = 150.0


def kubectl() -> str:
    return str(support.tool_path("kubectl"))


def commands(gpuctl: str, out_dir: str, env: dict[str, str]) -> dict[str, list[str]]:
    """Label -> argv of every command measured (apply --export-spec only where it exists)."""
    found = {
        "gpuctl --help": ["--help"],
        "gpuctl gpus": ["gpus"],
        "gpuctl mig validate 3g.20gb-2x2g.10gb --gpu a100-40gb":
            ["mig", "validate", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"],
        "gpuctl mig plan 3g.20gb-2x2g.10gb --gpu a100-40gb": ["mig", "plan", "3g.20gb-2x2g.10gb", "--gpu", "a100-40gb"],
        "gpuctl render -f tests/specs/good.yaml": ["render", "-f", str(SPEC)],
        "gpuctl render -f tests/specs/good.yaml --out DIR": ["render", "-f", str(SPEC), "--out", out_dir],
        "gpuctl cluster create --gpu t4 --export-spec": ["cluster", "create", "--gpu", "t4", "--export-spec"],
        "gpuctl apply -f tests/specs/good.yaml --export-spec": ["apply", "-f", str(SPEC), "--export-spec"],
        "gpuctl cluster create --help": ["cluster", "create", "--help"],
        "gpuctl tenant add --help": ["tenant", "add", "--help"],
        "gpuctl nodegroup add --help": ["nodegroup", "add", "--help"],
    }
    apply_help = subprocess.run([gpuctl, "apply", "--help"], capture_output=True, text=True, env=env).stdout
    if "--export-spec" not in apply_help:
        del found["gpuctl apply -f tests/specs/good.yaml --export-spec"]
    return {label: [gpuctl, *argv] for label, argv in found.items()}


def precompiled_copy(tree: Path) -> str:
    """gpuctl with templates/ and nodepools/ beside it (as in the checkout), byte-compiled; its path."""
    for name in ("gpuctl", "templates", "nodepools"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "gpuctl")], check=True)
    return str(tree)


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (median reported)")
    parser.add_argument("--target-ms", type=float, default=TARGET_MS, help="target median per command")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    parser.add_argument("--precompiled", action="store_true",
                        help="measure a byte-compiled copy of gpuctl (the checkout is left untouched)")
    opts = parser.parse_args()
    runs = max(opts.runs, 1)
    gpuctl = str(Path(sys.executable).parent / "gpuctl")
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as tmp:
        env = dict(os.environ, GPUCTL_CACHE_DIR=str(Path(tmp) / "cache"))
        if opts.precompiled:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [precompiled_copy(Path(tmp) / "tree"),
                                                              env.get("PYTHONPATH")]))
        first, _ = run_once([gpuctl, "--help"], env)  # fills the help cache (gpuctl/cli/entry.py)
        measured = {"kubectl version --client": [kubectl(), "version", "--client"],
                    **commands(gpuctl, str(Path(tmp) / "rendered"), env)}
        failed: dict[str, str] = {}
        for label, cmd in measured.items():  # once each: warms the page cache, and must succeed
            _, proc = run_once(cmd, env)
            if proc.returncode != 0:
                failed[label] = f"exit {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[-200:]}"
        samples: dict[str, list[float]] = {label: [] for label in measured if label not in failed}
        for _ in range(runs):
            for label in samples:
                samples[label].append(run_once(measured[label], env)[0])

    kube = statistics.median(samples.get("kubectl version --client") or [float("nan")])
    width = max(len(label) for label in measured)
    print(f"start-up, median of {runs} runs each; target <= {opts.target_ms:.0f} ms per gpuctl command")
    if opts.precompiled:
        print("gpuctl: a byte-compiled copy of this checkout, as `pip install` leaves it")
    elif os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("gpuctl: this checkout; PYTHONDONTWRITEBYTECODE is set, so its modules compile at every start "
              "(see --precompiled)")
    print(f"{'command':<{width}}  {'median':>9}  {'min':>9}  {'ratio':>5}  target")
    missed = []
    for label in measured:
        if label == "gpuctl --help":
            print(f"{'gpuctl --help, first run (renders every help)':<{width}}  {first * 1000:6.1f} ms")
        if label in failed:
            missed.append(label)
            print(f"{label:<{width}}  {'-':>9}  {'-':>9}  {'-':>5}  FAIL ({failed[label]})")
            continue
        median = statistics.median(samples[label])
        verdict = ""
        if label != "kubectl version --client":
            ok = median * 1000 <= opts.target_ms
            verdict = "PASS" if ok else "FAIL"
            if not ok:
                missed.append(label)
        print(f"{label:<{width}}  {median * 1000:6.1f} ms  {min(samples[label]) * 1000:6.1f} ms  "
              f"{median / kube:5.2f}  {verdict}")
    gpuctl_rows = len(measured) - 1
    print(f"targets: {'MET' if not missed else 'NOT MET'} ({gpuctl_rows - len(missed)} of {gpuctl_rows} "
          f"gpuctl commands within {opts.target_ms:.0f} ms)")
    return 0 if not missed or opts.no_fail else 1


if __name__ == "__main__":
    sys.exit(main())
