"""Taint, label and configure sharing on 1,000 sim GPU nodes: gpuctl against a kubectl script.

Targets (issue 3): gpuctl at least 3x faster than the kubectl script; zero Kubernetes writes on
a second, converged gpuctl run; peak memory printed.
Usage: .venv/bin/python -m bench.scale [--nodes N] [--min-speedup X] [--report-only]
CI runs it small (tests/integration/test_bench.py: --nodes 20 --report-only), so it cannot rot: at 20 nodes
start-up dominates and the speedup says little, so it is printed, not asserted; the write count still is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import support

SELECTOR = "gpuctl.dev/nodegroup=gpu"
TARGET_SPEEDUP = 3.0
REPLICAS = 4


def gpuctl_side(kubeconfig: Path, selector: str) -> None:
    """The gpuctl side, in a process of its own (`python -m bench.scale --gpuctl-side KUBECONFIG SELECTOR`), start-up
    and imports included, like kubectl's: its seconds, write requests, CPU and peak memory as JSON on stdout."""
    started = time.perf_counter()
    import kubernetes.client.rest as rest  # imports inside the clock, as kubectl's start-up is

    writes = 0
    original = rest.RESTClientObject.request

    def counting(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        if method not in ("GET", "HEAD", "OPTIONS"):
            writes += 1
        return original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = counting
    support.configure_gpu_nodes(support.api_client(kubeconfig), selector, REPLICAS)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": time.perf_counter() - started, "writes": writes,
                      "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mib": usage.ru_maxrss / 1024}))


KUBECTL_SCRIPT = """
set -euo pipefail
k() {{ "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }}
k taint nodes -l {selector} nvidia.com/gpu=true:NoSchedule --overwrite >/dev/null
k label nodes -l {selector} nvidia.com/device-plugin.config=slice-4 --overwrite >/dev/null
k create namespace gpu-operator --dry-run=client -o yaml | k apply -f - >/dev/null
k create configmap gpuctl-device-plugin-config -n gpu-operator --from-file=slice-4="$CONFIG_FILE" \\
  --from-file=default="$DEFAULT_FILE" \\
  --dry-run=client -o yaml | k apply -f - >/dev/null
"""

RESET_SCRIPT = """
set -euo pipefail
k() {{ "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }}
k taint nodes -l {selector} nvidia.com/gpu- >/dev/null
k label nodes -l {selector} nvidia.com/device-plugin.config- >/dev/null
k delete configmap -n gpu-operator gpuctl-device-plugin-config gpuctl-stack gpuctl-mig-parted-config \\
  --ignore-not-found >/dev/null
"""


def run_gpuctl(kubeconfig: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "bench.scale", "--gpuctl-side", str(kubeconfig), SELECTOR],
                         stdout=subprocess.PIPE, text=True, check=True, cwd=support.ROOT).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def run_script(script: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(["bash", "-c", script.format(selector=SELECTOR)], env=env, check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--min-speedup", type=float, default=TARGET_SPEEDUP, help="target for the exit code")
    parser.add_argument("--report-only", action="store_true",
                        help="print the speedup without asserting it (a small run: start-up dominates)")
    args = parser.parse_args()
    nodes, target = args.nodes, args.min_speedup
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as tmp:
        os.environ["GPUCTL_STATE_DIR"] = tmp
        started = time.perf_counter()
        support.create_sim_cluster("scale")
        try:
            # untainted, as before the GPU stack: both the kubectl script and gpuctl add the taint
            support.add_sim_nodes("scale", support.node_group("gpu", "t4", nodes, 1, taints=()))
            print(f"sim cluster with {nodes} Ready GPU nodes in {time.perf_counter() - started:.1f}s")
            kubeconfig = support.sim_kubeconfig("scale")
            config_file = Path(tmp) / f"slice-{REPLICAS}.yaml"
            config_file.write_text(support.plugin_config(REPLICAS))
            default_file = Path(tmp) / "default.yaml"
            default_file.write_text(support.plugin_config(1))
            env = dict(os.environ, KUBECTL=str(support.tool_path("kubectl")), KUBECONFIG_FILE=str(kubeconfig),
                       CONFIG_FILE=str(config_file), DEFAULT_FILE=str(default_file))

            kubectl_s = run_script(KUBECTL_SCRIPT, env)
            run_script(RESET_SCRIPT, env)
            first = run_gpuctl(kubeconfig)
            converged = run_gpuctl(kubeconfig)
        finally:
            support.delete_sim_cluster("scale")

    speedup = kubectl_s / first["seconds"]
    print(f"kubectl script (taint, label, ConfigMap)   {kubectl_s:6.2f} s")
    print(f"gpuctl (same work, one process)            {first['seconds']:6.2f} s  "
          f"({first['writes']:.0f} write requests, {first['cpu_s']:.2f} s CPU)")
    judged = "reported only" if args.report_only else "asserted"
    print(f"speedup gpuctl vs kubectl                  {speedup:6.2f}x  (target >= {target:g}x, {judged})")
    print(f"gpuctl converged re-run                    {converged['seconds']:6.2f} s  "
          f"({converged['writes']:.0f} write requests, target 0)")
    print(f"gpuctl peak memory (max RSS)               {max(first['max_rss_mib'], converged['max_rss_mib']):6.1f} MiB")
    ok = (args.report_only or speedup >= target) and converged["writes"] == 0
    scope = " (writes only; speedup reported only)" if args.report_only else ""
    print(f"targets: {'MET' if ok else 'NOT MET'}{scope}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--gpuctl-side"]:
        gpuctl_side(Path(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    sys.exit(main())
