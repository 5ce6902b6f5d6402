"""`gpuctl doctor` on a sim cluster of N GPU nodes with 10 faults injected on 10 of them: its time, start-up
included, and its findings held against the faults, with `gpuctl status` on the same cluster as the baseline.

Issue 31: doctor on a 1,000-node sim cluster with 10 injected faults names all 10 in under 5 s.
The cluster: `gpuctl cluster create --cloud sim --gpu t4 --nodes N --gpus-per-node 2 --slices 2 --no-validate`,
the sim's DCGM exporter and Prometheus running (doctor reads the failed GPUs' XIDs there). A healthy run first
(no finding, exit 0), then two faults of each of five kinds, each on a node of its own, as they come on a real
cluster and as the sim plays them:
- gpu-failed: XID 79 (fallen off the bus) on GPU 1 (annotation sim.gpuctl.dev/fault-xid "1:79"); seen once the
  device plugin marked it (allocatable 2 of capacity 4) and Prometheus holds DCGM_FI_DEV_XID_ERRORS 79 for it;
- mig-change-failed: nvidia.com/mig.config.state=failed (mig-parted #484's end state);
- mig-change-wedged: state pending and the operands' deploy labels at paused-for-mig-change (gpu-operator #2833);
  seen once the device plugin's DaemonSet withdrew its pod and the kubelet zeroed the node's GPUs;
- plugin-serves-nothing: the device plugin's config race (k8s-device-plugin #1645: the sim's annotation
  sim.gpuctl.dev/fault-plugin-config-race, its plugin reloaded); seen at nvidia.com/gpu 0 with the plugin pod
  older than the seconds doctor gives a plugin to register;
- gpu-taint-missing: the node group's taint nvidia.com/gpu=true:NoSchedule removed by hand.
Each is waited for by polling the cluster (one LIST of the nodes and one of the plugin pods per look). Then
`gpuctl -o json doctor` and `gpuctl -o json status` (the same nodes, read by the same LISTs) run R times each, as a
user runs them, in their own process; and doctor through gpuctl.api in this process, imports done (the command's
own work). The findings must be exactly the 10 faults: (node, check), GPU and XID for a failed GPU; none else.
The cluster is deleted afterwards. Last line of stdout: the figures as JSON.
Usage: .venv/bin/python -m bench.doctor [--nodes N] [--runs R] [--max-seconds X] [--report-only] [--keep DIR]
CI runs it small (tests/integration/test_bench.py: --nodes 20 --runs 1 --report-only), so it cannot rot: the
findings are asserted there, the time printed only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import support
from bench.support import gpuctl, log

CLUSTER = "bench-doctor"
GPUS_PER_NODE, SLICES = 2, 2
TARGET_S = 5.0
FAULTS = 10
NAMESPACE = "gpu-operator"  # the GPU Operator's, where the device-plugin pods run
PLUGIN_PODS = "app=nvidia-device-plugin-daemonset"
GPU = "nvidia.com/gpu"
FAULT_XID = "sim.gpuctl.dev/fault-xid"  # gpuctl/simulator/xid.py
CONFIG_RACE = "sim.gpuctl.dev/fault-plugin-config-race"  # gpuctl/simulator/operator.py
LOADED = "sim.gpuctl.dev/device-plugin-loaded"  # what the node's plugin pod loaded: removed, it loads again
MIG_STATE = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
# what the MIG manager pauses while it changes a node's MIG layout (gpu-operator's reconfigure script)
PAUSED_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter")
XID_GPU, XID = 1, 79
PLUGIN_GRACE_S = 10.0  # doctor blames a plugin only once it ran this long (gpuctl.ops.platform.capacity.RACE_GRACE_S)
KINDS = ("gpu-failed", "mig-change-failed", "mig-change-wedged", "plugin-serves-nothing", "gpu-taint-missing")
WAIT_S = 600.0  # for the faults to be seen, the monitoring to start: a stall, not a measure


def timed(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=support.ROOT, timeout=600)
    return proc, time.perf_counter() - started


class Cluster:
    """The sim cluster read and written as JSON through a Kubernetes client."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client

        self.api = client.CoreV1Api(support.api_client(kubeconfig))

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The GPU nodes by name (one LIST)."""
        items = json.loads(self.api.list_node(_preload_content=False).data)["items"]
        return {n["metadata"]["name"]: n for n in items if GPU in (n["status"].get("capacity") or {})}

    def plugin_pods(self) -> dict[str, dict[str, Any]]:
        """node -> its running device-plugin pod (one LIST)."""
        items = json.loads(self.api.list_namespaced_pod(NAMESPACE, label_selector=PLUGIN_PODS,
                                                        _preload_content=False).data)["items"]
        return {p["spec"]["nodeName"]: p for p in items
                if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")}

    def patch(self, node: str, body: dict[str, Any]) -> None:
        self.api.patch_node(node, body)  # a merge patch (a dict body); None removes a key

    def remove_gpu_taint(self, node: str) -> None:
        """The node's nvidia.com/gpu taints removed, at the resourceVersion read (the sim patches taints too)."""
        from kubernetes.client.exceptions import ApiException

        while True:
            current = json.loads(self.api.read_node(node, _preload_content=False).data)
            taints = current["spec"].get("taints") or []
            try:
                self.api.patch_node(node, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                                           "spec": {"taints": [t for t in taints if t["key"] != GPU] or None}})
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise


def allocatable(node: dict[str, Any], kind: str = "allocatable") -> int:
    return int((node["status"].get(kind) or {}).get(GPU, "0"))


def age_s(pod: dict[str, Any]) -> float:
    started = pod["status"].get("startTime")
    if not started:
        return 0.0
    return (datetime.now(timezone.utc) - datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()


def healthy(node: dict[str, Any], pod: dict[str, Any] | None) -> bool:
    """A node serving all its GPU slices through a ready plugin pod doctor would judge (older than its grace)."""
    if pod is None or age_s(pod) <= PLUGIN_GRACE_S + 1:
        return False
    ready = all(s.get("ready") for s in pod["status"].get("containerStatuses") or [])
    return ready and allocatable(node) == allocatable(node, "capacity") == GPUS_PER_NODE * SLICES


def inject(cluster: Cluster, node: str, kind: str) -> None:
    if kind == "gpu-failed":
        cluster.patch(node, {"metadata": {"annotations": {FAULT_XID: f"{XID_GPU}:{XID}"}}})
    elif kind == "mig-change-failed":
        cluster.patch(node, {"metadata": {"labels": {MIG_STATE: "failed"}}})
    elif kind == "mig-change-wedged":
        paused: dict[str, str | None] = {f"nvidia.com/gpu.deploy.{o}": PAUSED for o in PAUSED_OPERANDS}
        cluster.patch(node, {"metadata": {"labels": {MIG_STATE: "pending", **paused}}})
    elif kind == "plugin-serves-nothing":
        cluster.patch(node, {"metadata": {"annotations": {CONFIG_RACE: "true", LOADED: None}}})
    elif kind == "gpu-taint-missing":
        cluster.remove_gpu_taint(node)


def seen(kind: str, node: dict[str, Any], pod: dict[str, Any] | None) -> bool:
    """Whether the fault `kind` shows on `node` as the sim makes it (the XID in Prometheus is looked at apart)."""
    labels = node["metadata"].get("labels") or {}
    if kind == "gpu-failed":  # GPU 1's 2 slices out of allocatable, kept in capacity
        return (allocatable(node, "capacity"), allocatable(node)) == (GPUS_PER_NODE * SLICES,
                                                                      (GPUS_PER_NODE - 1) * SLICES)
    if kind == "mig-change-failed":
        return labels.get(MIG_STATE) == "failed"
    if kind == "mig-change-wedged":  # the plugin's DaemonSet withdrew its pod; the kubelet zeroed the GPUs
        return labels.get(MIG_STATE) == "pending" and pod is None and allocatable(node) == 0
    if kind == "plugin-serves-nothing":
        return allocatable(node) == allocatable(node, "capacity") == 0 and pod is not None \
            and age_s(pod) > PLUGIN_GRACE_S + 1
    return not any(t["key"] == GPU for t in node["spec"].get("taints") or [])


def xids_in_prometheus(url: str) -> set[tuple[str, int, int]]:
    """(node, GPU, XID) of each GPU with a last XID, as Prometheus holds dcgm-exporter's series (its node label
    Hostname, or hostname as the sim's exporter writes it: both are read, as doctor reads them)."""
    query = urllib.parse.urlencode({"query": "DCGM_FI_DEV_XID_ERRORS > 0"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        result = json.load(answer)["data"]["result"]
    return {(m.get("Hostname") or m.get("hostname", ""), int(m.get("gpu", -1)), int(float(r["value"][1])))
            for r in result for m in [r["metric"]]}


def wait_seen(cluster: Cluster, faults: dict[str, str], url: str, timeout: float) -> None:
    """Until every fault shows; past `timeout`, end the benchmark naming those that do not."""
    xids = {(node, XID_GPU, XID) for node, kind in faults.items() if kind == "gpu-failed"}
    waiting: list[str] = []

    def check() -> bool:
        nodes, pods = cluster.nodes(), cluster.plugin_pods()
        waiting[:] = [f"{kind} {n}" for n, kind in faults.items() if not seen(kind, nodes[n], pods.get(n))]
        waiting.extend(f"XID {x} of GPU {g} on {n} in Prometheus" for n, g, x in sorted(xids - xids_in_prometheus(url)))
        return not waiting

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"bench.doctor: after {timeout:.0f}s the sim does not show: {'; '.join(waiting)}")
        time.sleep(1.0)


def judge(findings: list[dict[str, Any]], faults: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(matched, missed, extra): each as 'check node' lines."""
    expected = {(node, kind) for node, kind in faults.items()}
    matched: list[str] = []
    extra: list[str] = []
    for f in findings:
        key = (f.get("node"), f["check"])
        right = key in expected and (f["check"] != "gpu-failed" or
                                     (f.get("gpu"), f["evidence"].get("xid")) == (XID_GPU, XID))
        (matched if right else extra).append(f"{f['check']} {f.get('node') or f['object']}")
        if right:
            expected.discard(key)
    return matched, [f"{kind} {node}" for node, kind in sorted(expected)], extra


def spread(names: list[str], count: int) -> list[str]:
    """`count` names spread over the sorted `names` (first and last included)."""
    return [names[round(i * (len(names) - 1) / (count - 1))] for i in range(count)]


def runs_of(command: list[str], env: dict[str, str], runs: int, exits: tuple[int, ...]) -> tuple[list[float], str]:
    seconds, out = [], ""
    for _ in range(runs):
        proc, took = timed(command, env)
        if proc.returncode not in exits:
            sys.exit(f"bench.doctor: {' '.join(command[3:])} exited {proc.returncode}: {proc.stderr.strip()}")
        seconds.append(took)
        out = proc.stdout
    return seconds, out


def in_process(kubeconfig: Path, runs: int) -> list[float]:
    """doctor through gpuctl.api in this process, once to load its modules, then timed `runs` times."""
    from gpuctl import api

    target = api.ClusterTarget(kubeconfig)
    api.doctor(target=target)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        api.doctor(target=target)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=TARGET_S)
    parser.add_argument("--wait", type=float, default=WAIT_S, help="seconds for the faults to show (a stall)")
    parser.add_argument("--keep", metavar="DIR", help="state dir and kubeconfig in DIR, the cluster left running "
                        "(to profile doctor against it; delete it with gpuctl cluster delete --cloud sim)")
    parser.add_argument("--report-only", action="store_true",
                        help="print doctor's time without asserting it (a small run on a shared machine)")
    args = parser.parse_args()
    if args.nodes < FAULTS:
        parser.error(f"--nodes must be >= {FAULTS}: one node per fault")
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-doctor-") as tmp:
        home = args.keep or tmp
        kubeconfig = Path(home) / "kubeconfig"
        env = dict(os.environ, GPUCTL_STATE_DIR=str(Path(home) / "state"), KUBECONFIG=str(kubeconfig))
        os.environ.update(GPUCTL_STATE_DIR=env["GPUCTL_STATE_DIR"])  # the sim's state, for this process
        create = gpuctl("cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", "t4", "--nodes",
                        str(args.nodes), "--gpus-per-node", str(GPUS_PER_NODE), "--slices", str(SLICES),
                        "--no-validate")
        try:
            log(f"$ gpuctl {' '.join(create[3:])}")
            made, create_s = timed(create, env)
            if made.returncode != 0:
                print(made.stderr, file=sys.stderr)
                return 1
            cluster = Cluster(kubeconfig)
            started = time.perf_counter()
            log("starting the sim's DCGM exporter and Prometheus")
            url = support.ensure_sim_monitoring(CLUSTER, timeout=WAIT_S)
            support.wait_until("bench.doctor", f"{args.nodes} nodes serving", lambda: sum(
                healthy(n, pods.get(name)) for pods in [cluster.plugin_pods()]
                for name, n in cluster.nodes().items()) == args.nodes, WAIT_S, every=1.0)
            ready_s = time.perf_counter() - started
            clean, clean_s = timed(gpuctl("-o", "json", "doctor"), env)
            clean_findings = json.loads(clean.stdout or "null")

            faults = {node: KINDS[i % len(KINDS)] for i, node in enumerate(spread(sorted(cluster.nodes()), FAULTS))}
            started = time.perf_counter()
            for node, kind in faults.items():
                inject(cluster, node, kind)
            log(f"injected {FAULTS} faults; waiting until the sim shows each")
            wait_seen(cluster, faults, url, args.wait)
            seen_s = time.perf_counter() - started

            doctor_s, out = runs_of(gpuctl("-o", "json", "doctor"), env, args.runs, (6,))
            findings = json.loads(out)
            status_s, _ = runs_of(gpuctl("-o", "json", "status"), env, args.runs, (0,))
            api_s = in_process(kubeconfig, args.runs)
        finally:
            if args.keep:
                log(f"cluster {CLUSTER} kept: GPUCTL_STATE_DIR={env['GPUCTL_STATE_DIR']} KUBECONFIG={kubeconfig}")
            else:
                subprocess.run(gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes"), env=env,
                               capture_output=True, timeout=600, cwd=support.ROOT)
    matched, missed, extra = judge(findings, faults)
    median, baseline, api_median = statistics.median(doctor_s), statistics.median(status_s), statistics.median(api_s)
    found_all = len(matched) == FAULTS and not missed and not extra
    clean_ok = clean.returncode == 0 and clean_findings == []
    fast = median < args.max_seconds
    judged = " (reported only)" if args.report_only else ""
    kinds = ", ".join(f"{sum(v == k for v in faults.values())} {k}" for k in KINDS)
    print(f"sim cluster: {args.nodes} nodes x {GPUS_PER_NODE} T4 ({SLICES} slices each) (create {create_s:.1f}s, "
          f"DCGM exporter + Prometheus and every plugin serving {ready_s:.1f}s)")
    print(f"healthy: gpuctl -o json doctor exit {clean.returncode}, {len(clean_findings or [])} findings, "
          f"{clean_s:.2f}s")
    print(f"faults injected: {FAULTS} on {len(faults)} nodes ({kinds}); all seen after {seen_s:.1f}s")
    print(f"findings matched: {len(matched)} of {FAULTS}, missed {len(missed)}, extra {len(extra)}")
    for line in missed:
        print(f"  missed: {line}")
    for line in extra:
        print(f"  extra: {line}")
    print(f"gpuctl -o json doctor: median {median:.2f}s of {len(doctor_s)} runs "
          f"({', '.join(f'{s:.2f}' for s in doctor_s)}), start-up included; in-process api.doctor "
          f"{api_median:.2f}s")
    print(f"baseline gpuctl -o json status (the same nodes and plugin pods, one LIST each): median {baseline:.2f}s; "
          f"ratio doctor / status {median / baseline:.2f}x")
    print(f"target: all {FAULTS} found, none extra, < {args.max_seconds:g}s: {len(matched)} found, "
          f"{median / args.max_seconds:.2f}x the time{judged}")
    met = found_all and clean_ok and (args.report_only or fast)
    scope = " (findings; time reported only)" if args.report_only else ""
    print(f"targets: {'MET' if met else 'NOT MET'}{scope}")
    print(json.dumps({"nodes": args.nodes, "faults": faults, "matched": len(matched), "missed": missed,
                      "extra": extra, "healthy_findings": len(clean_findings or []), "healthy_exit": clean.returncode,
                      "healthy_seconds": clean_s, "doctor_seconds": doctor_s, "median": median,
                      "api_seconds": api_s, "status_seconds": status_s, "ratio": median / baseline,
                      "create_seconds": create_s, "ready_seconds": ready_s, "seen_seconds": seen_s}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
