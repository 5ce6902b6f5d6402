"""`gpuctl cluster create --cloud sim --gpu t4 --nodes N --slices 4` on a fresh sim cluster: time and exit code.

Issue 18: at 1,000 nodes the create ended with exit 7 after 163 s, the capacity wait's fixed 120 s
deadline run out while the device-plugin pods were still rolling out. Waits now last while nodes keep
converging (gpuctl.util.waiting). Target: exit 0 on the first run (no --timeout: only a stall ends a wait);
issue 32's, at 1,000 nodes and more: under 120 s (--max-seconds sets another limit at any size).
The command runs as a user runs it, in its own process (start-up included), with a state dir and a
kubeconfig of its own; its step lines are passed through to stderr as they come, and the cluster is
deleted afterwards. Last line of stdout: the figures as JSON.
Usage: .venv/bin/python -m bench.create [--nodes N] [--slices S] [--gpu GPU] [--max-seconds X]
CI runs it small (tests/integration/test_bench.py: --nodes 3), so it cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import support
from bench.support import ROOT, gpuctl

CLUSTER = "bench-create"
TARGET_S, TARGET_NODES = 120.0, 1000  # issue 32: a 1,000-node first create under 120 s
STEP = re.compile(r"^(\S+)\s+(created|updated|no change|passed|deleted)\s+([0-9.]+)s$")


def run_create(args: argparse.Namespace, env: dict[str, str]) -> tuple[int, float, dict[str, float], list[str],
                                                                        dict[str, float]]:
    """The create, its stderr passed through: exit code, seconds, seconds per step, the last stderr lines, and
    the CPU seconds the sim cluster's processes and the gpuctl command (helm and kwokctl included) used."""
    command = gpuctl("cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", args.gpu,
                     "--nodes", str(args.nodes), "--slices", str(args.slices))
    print(f"$ gpuctl {' '.join(command[3:])}", file=sys.stderr, flush=True)
    steps: dict[str, float] = {}
    tail: list[str] = []
    started = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=ROOT) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            print(f"  | {line}", end="", file=sys.stderr, flush=True)
            tail = [*tail[-9:], line.rstrip()]
            if match := STEP.match(line.strip()):
                steps[match[1]] = float(match[3])
        code = proc.wait()
    seconds = time.perf_counter() - started
    cpu = support.sim_cpu_seconds(CLUSTER)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu["gpuctl"] = children.ru_utime + children.ru_stime  # its helm and kwokctl children too, not the cluster's
    return code, seconds, steps, tail, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--gpu", default="t4")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help=f"fail from this many seconds (default {TARGET_S:g} from {TARGET_NODES} nodes, else none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-create-") as tmp:
        os.environ["GPUCTL_STATE_DIR"] = str(Path(tmp) / "state")  # where sim_cpu_seconds finds the cluster
        env = dict(os.environ, KUBECONFIG=str(Path(tmp) / "kubeconfig"))
        try:
            code, seconds, steps, tail, cpu = run_create(args, env)
        finally:
            deleted = subprocess.run(gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes"),
                                     capture_output=True, text=True, env=env, cwd=ROOT)
            if deleted.returncode != 0:
                print(f"cluster delete failed: {deleted.stderr.strip()}", file=sys.stderr)
    slowest = sorted(steps.items(), key=lambda kv: -kv[1])[:4]
    print(f"gpuctl cluster create --cloud sim --gpu {args.gpu} --nodes {args.nodes} --slices {args.slices}")
    print(f"exit code {code} after {seconds:.1f} s (first run, fresh cluster)")
    print("slowest steps: " + ", ".join(f"{name} {s:.1f} s" for name, s in slowest))
    print(support.cpu_report(cpu, seconds))
    if code != 0:
        print("last lines: " + " / ".join(tail))
    most = args.max_seconds if args.max_seconds is not None else TARGET_S if args.nodes >= TARGET_NODES else 0.0
    ok = code == 0 and (not most or seconds < most)
    limit = f", under {most:g} s" if most else ""
    print(f"targets: {'MET' if ok else 'NOT MET'} (exit 0{limit})")
    print(json.dumps({"nodes": args.nodes, "gpu": args.gpu, "slices": args.slices, "exit_code": code,
                      "seconds": round(seconds, 1), "steps": steps,
                      "cpu_s": {name: round(value, 1) for name, value in cpu.items()}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
