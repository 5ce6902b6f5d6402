"""Karpenter on the sim: N one-slice pods to all bound, nodes launched vs the minimum, with and without the overlay.

Issue 20: a time-sliced GPU node advertises nvidia.com/gpu x replicas, but Karpenter sizes an instance type by
its physical GPUs, so without gpuctl's NodeOverlay (karpenter.sh/v1alpha1, capacity nvidia.com/gpu: GPUs x
replicas) it launches a node per one-slice pod (kubernetes-sigs/karpenter #729). One sim cluster, made by
`gpuctl cluster create --cloud sim --karpenter --gpu t4 --slices R --nodes 0 --max-nodes M --no-validate`
(Karpenter's real controller, sigs.k8s.io/karpenter v1.15.0 kwok provider, runs beside it; M = N unless
--max-nodes says otherwise, so that the NodePool's limits do not cut the run without the overlay short), then
two runs, one after the other:

- overlay: the NodePool gpuctl-gpu and NodeOverlay gpuctl-gpu as gpuctl applies them;
- no overlay: the NodeOverlay deleted, the NodePool unchanged.

Each run starts from zero NodeClaims (the previous run's are deleted and waited out), creates N pods at once
from a pool of client threads (busybox, nodeSelector gpuctl.dev/nodegroup=gpu, tolerating the GPU taint,
limits nvidia.com/gpu: 1) and follows pods and NodeClaims with watches. The clock (time.perf_counter) starts
before the first create and stops when a watch has seen the last pod bound (spec.nodeName). Counted: the
NodeClaims launched during the run (every name seen) and how many came in Karpenter's first second, the most
live at once, the nodes the pods landed on, the live claims holding none of the pods at the last bind (empty),
the physical GPUs launched (each claim's instance type, node.kubernetes.io/instance-type, in gpuctl's
catalog), what each claim requested (spec.resources.requests nvidia.com/gpu), and whether Karpenter applied
the overlay to it (annotation karpenter.sh/capacity-overlay-applied). Minimum: ceil(N / R) one-T4 nodes.
With --settle S the watches go on until S seconds after the last bind, and the claims still there are counted
(the sim's NodePool consolidates an empty node after consolidateAfter 30 s; a node holding a pod stays).

Usage: .venv/bin/python -m bench.karpenter [--pods N] [--replicas R] [--max-nodes M] [--workers W] [--timeout S]
                                                [--settle S] [--max-ratio X]
Exit status 1 when a run's pods are not all bound within --timeout, when the run without the overlay still saw
it applied, or when the overlay run launches more than --max-ratio times the minimum (0, the default: report
only). CI runs it small (tests/integration/test_bench.py: --pods 8), so it cannot rot. The cluster is deleted at
the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import support
from bench.support import ROOT, gpuctl, log

CLUSTER = "bench-karpenter"
GPU = "t4"
GROUP = "gpu"
NS = "bench"
POOL = "gpuctl-gpu"  # the NodePool and NodeOverlay gpuctl writes for node group `gpu` (stack/karpenter.py)
KARPENTER = ("karpenter.sh", "v1", "nodeclaims")
OVERLAY = ("karpenter.sh", "v1alpha1", "nodeoverlays", POOL)
EXTENDED = "nvidia.com/gpu"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"


def create_cluster(args: argparse.Namespace, env: dict[str, str]) -> None:
    """The user's command, in its own process; its stderr passed through. Without its validate step: that
    launches a node through Karpenter for its smoke test, which each run would only have to take away again."""
    command = gpuctl("cluster", "create", "--cloud", "sim", "--name", CLUSTER, "--gpu", GPU, "--slices",
                     str(args.replicas), "--karpenter", "--nodes", "0", "--max-nodes", str(args.max_nodes),
                     "--no-validate")
    log(f"$ gpuctl {' '.join(command[3:])}")
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=ROOT) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            log(f"  | {line.rstrip()}")
        if proc.wait() != 0:
            sys.exit(f"bench.karpenter: the cluster create ended with exit {proc.returncode}")


def delete_cluster(env: dict[str, str]) -> None:
    deleted = subprocess.run(gpuctl("cluster", "delete", "--cloud", "sim", "--name", CLUSTER, "--yes"),
                             capture_output=True, text=True, env=env, cwd=ROOT)
    if deleted.returncode != 0:
        log(f"bench.karpenter: cluster delete failed: {deleted.stderr.strip()}")


def render_pod(name: str) -> dict[str, Any]:
    """One pod asking for one slice of the group's time-sliced GPUs."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeSelector": {"gpuctl.dev/nodegroup": GROUP},
                     "tolerations": [{"key": EXTENDED, "operator": "Exists", "effect": "NoSchedule"}],
                     "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                     "resources": {"limits": {EXTENDED: "1"}}}]}}


@dataclass
class Claim:
    first_seen: float
    instance_type: str = ""
    requested: str = ""  # spec.resources.requests nvidia.com/gpu
    overlay: bool = False  # the karpenter.sh/capacity-overlay-applied annotation
    node: str = ""
    gone: float | None = None


@dataclass
class Seen:
    """What the watches saw: when each pod was first bound (and where), each NodeClaim and what it said."""

    pods: int
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (time, node)
    claims: dict[str, Claim] = field(default_factory=dict)
    peak: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def live(self) -> int:
        return sum(1 for c in self.claims.values() if c.gone is None)


def watch(list_call: Any, resource_version: str, seen: Seen, stop: threading.Event, on_event: Any) -> None:
    """Follow a LIST's watch from `resource_version`, calling on_event(type, object, time) for each event, until
    `stop`."""
    try:
        for kind, obj, now in support.watch_events(list_call, resource_version, stop):
            with seen.lock:
                on_event(kind, obj, now)
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        seen.error = exc
        seen.done.set()


def on_pod(seen: Seen) -> Any:
    def record(kind: str, obj: dict[str, Any], now: float) -> None:
        name, node = obj["metadata"]["name"], obj["spec"].get("nodeName")
        if kind != "DELETED" and node and name not in seen.bound:
            seen.bound[name] = (now, node)
            if len(seen.bound) >= seen.pods:
                seen.done.set()
    return record


def on_claim(seen: Seen) -> Any:
    def record(kind: str, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        claim = seen.claims.setdefault(meta["name"], Claim(now))
        claim.instance_type = (meta.get("labels") or {}).get(INSTANCE_TYPE, claim.instance_type)
        claim.requested = ((obj.get("spec") or {}).get("resources") or {}).get("requests", {}).get(EXTENDED, "")
        claim.overlay = (meta.get("annotations") or {}).get(OVERLAY_APPLIED) == "true"
        claim.node = (obj.get("status") or {}).get("nodeName") or claim.node
        if kind == "DELETED":
            claim.gone = now
        seen.peak = max(seen.peak, seen.live())
    return record


def wait_until(what: str, check: Any, timeout: float) -> None:
    support.wait_until("bench.karpenter", what, check, timeout, every=0.2)


def items(response: Any) -> list[dict[str, Any]]:
    return json.loads(response.data)["items"]


def reset(v1: Any, custom: Any) -> None:
    """No bench pod, no NodeClaim, no node Karpenter launched: every run starts from zero."""
    v1.delete_collection_namespaced_pod(NS, grace_period_seconds=0, _preload_content=False).drain_conn()
    wait_until("the bench pods gone", lambda: not items(v1.list_namespaced_pod(NS, _preload_content=False)), 120)
    custom.delete_collection_cluster_custom_object(*KARPENTER, _preload_content=False).drain_conn()
    wait_until("no NodeClaim", lambda: not items(custom.list_cluster_custom_object(*KARPENTER,
                                                                                   _preload_content=False)), 300)
    wait_until("no node of Karpenter's", lambda: not items(v1.list_node(label_selector="karpenter.sh/nodepool",
                                                                        _preload_content=False)), 120)


def run(label: str, client: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One run from zero NodeClaims: N pods created at once, followed until all bound (and --settle more)."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi

    v1, custom = CoreV1Api(client), CustomObjectsApi(client)
    began = time.perf_counter()
    reset(v1, custom)
    log(f"{label}: zero NodeClaims after {time.perf_counter() - began:.1f}s")
    gpus_of = {it.name: it.gpus for it in support.gpu(GPU).instance_types}
    seen, stop = Seen(args.pods), threading.Event()
    threads = []
    for list_call, record in ((partial(v1.list_namespaced_pod, NS), on_pod(seen)),
                              (partial(custom.list_cluster_custom_object, *KARPENTER), on_claim(seen))):
        rv = json.loads(list_call(_preload_content=False).data)["metadata"]["resourceVersion"]
        threads.append(threading.Thread(target=watch, args=(list_call, rv, seen, stop, record), daemon=True))
    for t in threads:
        t.start()
    log(f"{label}: creating {args.pods} pods")

    def create(name: str) -> None:
        v1.create_namespaced_pod(NS, render_pod(name), _preload_content=False).drain_conn()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        list(pool.map(create, [f"slice-{i:04d}" for i in range(args.pods)]))
    created = time.perf_counter() - t0
    finished = seen.done.wait(args.timeout)
    if seen.error is not None:
        stop.set()
        raise seen.error
    with seen.lock:
        bound = dict(seen.bound)
        claims = {name: Claim(**vars(c)) for name, c in seen.claims.items()}
        peak = seen.peak
    if not finished:
        stop.set()
        log(f"bench.karpenter: {label}: after {args.timeout:.0f}s {len(bound)} of {args.pods} pods bound, "
            f"{len(claims)} NodeClaims launched")
        return {"label": label, "bound": len(bound), "finished": False}
    end = max(t for t, _ in bound.values())
    used = Counter(node for _, node in bound.values())
    # Every GPU node is one of Karpenter's (the group has 0 fixed nodes): the live claims the pods left alone
    empty = sum(1 for c in claims.values() if c.gone is None) - len(used)
    over = overcommitted(v1, used, args.replicas)
    log(f"{label}: all {args.pods} bound after {end - t0:.2f}s; {len(claims)} NodeClaims, {empty} empty")

    # A claim made just before the last bind gets its instance type when the cloud provider launches it: the
    # watch goes on until every claim of the run has one, or is gone without (never launched: no GPU).
    def launched() -> bool:
        with seen.lock:
            return all(seen.claims[n].instance_type or seen.claims[n].gone is not None for n in claims)

    wait_until(f"{label}: the instance type of every NodeClaim", launched, 60)
    with seen.lock:
        for name in claims:
            claims[name].instance_type = seen.claims[name].instance_type
    left = None
    if args.settle:
        time.sleep(max(0.0, args.settle - (time.perf_counter() - end)))  # S seconds after the last bind
        with seen.lock:
            left = seen.live()
            launched_by_then = len(seen.claims)
    stop.set()
    if seen.error is not None:
        raise seen.error
    unknown = sorted({c.instance_type for c in claims.values() if c.instance_type} - set(gpus_of))
    if unknown:
        sys.exit(f"bench.karpenter: {label}: instance types not in gpuctl's catalog: {unknown}")
    minimum = math.ceil(args.pods / args.replicas)
    first = min((c.first_seen for c in claims.values()), default=t0)
    return {"label": label, "finished": True, "seconds": end - t0, "create_s": created,
            "first_claim_s": min(c.first_seen for c in claims.values()) - t0 if claims else None,
            "last_claim_s": max(c.first_seen for c in claims.values()) - t0 if claims else None,
            "first_wave": sum(1 for c in claims.values() if c.first_seen - first < 1.0),
            "claims": len(claims), "peak": peak, "nodes_used": len(used), "most_per_node": max(used.values()),
            "overcommitted": over, "empty": empty, "minimum": minimum, "ratio": len(claims) / minimum,
            "gpus": sum(gpus_of.get(c.instance_type, 0) for c in claims.values()),
            "instance_types": dict(Counter(c.instance_type or "(none)" for c in claims.values())),
            "requested": dict(sorted(Counter(c.requested or "?" for c in claims.values()).items())),
            "overlay_applied": sum(c.overlay for c in claims.values()),
            "left_after_settle": left, "launched_during_settle": (launched_by_then - len(claims)) if left is not None
            else None}


def overcommitted(v1: Any, used: Counter[str], replicas: int) -> int:
    """How many nodes hold more of the pods than they advertise nvidia.com/gpu, read once every node the pods
    use advertises its GPUs x replicas (up to 60 s): a node Karpenter's kwok provider makes starts with the
    instance type's allocatable (1 GPU), then has none until the sim's device plugin serves it."""
    deadline = time.monotonic() + 60
    while True:
        nodes = json.loads(v1.list_node(label_selector=f"gpuctl.dev/nodegroup={GROUP}",
                                        _preload_content=False).data)["items"]
        allocatable = {n["metadata"]["name"]: int(n["status"].get("allocatable", {}).get(EXTENDED, "0"))
                       for n in nodes}
        if all(allocatable.get(node) == replicas for node in used) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    over = {node: (pods, allocatable.get(node)) for node, pods in used.items() if pods > allocatable.get(node, 0)}
    for node, (pods, gpus) in sorted(over.items()):
        log(f"  node {node}: {pods} pods, allocatable {EXTENDED} {gpus if gpus is not None else '(node gone)'}")
    return len(over)


def remove_overlay(client: Any) -> None:
    """Delete gpuctl's NodeOverlay; wait until it is gone and give Karpenter's overlay controller (it
    reconciles on the delete event) a moment to rebuild its instance types."""
    from kubernetes.client import CustomObjectsApi

    custom = CustomObjectsApi(client)
    custom.delete_cluster_custom_object(*OVERLAY, _preload_content=False).drain_conn()

    def gone() -> bool:
        return not support.exists(custom.get_cluster_custom_object, *OVERLAY, _preload_content=False)

    wait_until("the NodeOverlay gone", gone, 60)
    time.sleep(5)


def prepare(client: Any) -> None:
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(client)
    v1.create_namespace({"metadata": {"name": NS}})
    wait_until("the namespace's default ServiceAccount", lambda: bool(
        v1.list_namespaced_service_account(NS, field_selector="metadata.name=default").items), 60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100, help="one-slice pods, created at once")
    parser.add_argument("--replicas", type=int, default=4, help="time-slicing replicas per GPU (--slices)")
    parser.add_argument("--max-nodes", type=int, default=None, help="the NodePool's node limit (default: --pods)")
    parser.add_argument("--workers", type=int, default=16, help="client threads creating pods")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run's pods may take to bind")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to keep watching after the last bind (consolidation), then count claims left")
    parser.add_argument("--max-ratio", type=float, default=0.0,
                        help="exit 1 when the overlay run launches more than this many times the minimum "
                             "(0: report only)")
    args = parser.parse_args()
    if args.max_nodes is None:
        args.max_nodes = args.pods
    if min(args.pods, args.replicas, args.max_nodes, args.workers) < 1:
        parser.error("--pods, --replicas, --max-nodes and --workers must be >= 1")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-karpenter-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        env = dict(os.environ, GPUCTL_STATE_DIR=str(Path(tmp) / "state"), KUBECONFIG=str(kubeconfig))
        os.environ.update(GPUCTL_STATE_DIR=env["GPUCTL_STATE_DIR"], KUBECONFIG=env["KUBECONFIG"])
        try:
            create_cluster(args, env)
            client = support.api_client(kubeconfig)
            prepare(client)
            with_overlay = run("overlay", client, args)
            if with_overlay["finished"]:
                remove_overlay(client)
                without = run("no overlay", client, args)
            else:
                without = {"label": "no overlay", "finished": False, "bound": None}  # not run
        finally:
            delete_cluster(env)
    total = time.perf_counter() - started

    print(f"{args.pods} one-slice pods (nvidia.com/gpu: 1), {GPU} time-sliced x{args.replicas}, Karpenter "
          f"v1.15.0 kwok provider, NodePool limit {args.max_nodes} nodes, {args.workers} client threads, "
          f"{os.cpu_count()} CPUs")
    runs = (with_overlay, without)
    failed = [r["label"] for r in runs if not r["finished"] and r["bound"] is not None]
    for r in runs:
        if r["finished"]:
            continue
        if r["bound"] is None:
            print(f"{r['label']:<11} not run")
        else:
            print(f"{r['label']:<11} NOT BOUND: {r['bound']} of {args.pods} pods after {args.timeout:.0f} s")
    if failed:
        print(f"targets: NOT MET (pods not all bound: {', '.join(failed)})")
        return 1
    print(f"{'run':<11} {'pods':>5} {'bound (s)':>9} {'NodeClaims':>10} {'peak':>5} {'used':>5} {'empty':>5} "
          f"{'minimum':>7} {'ratio':>6} {'GPUs':>5}  claims' {EXTENDED} requests")
    for r in runs:
        requests = ", ".join(f"{n} x {k}" for k, n in r["requested"].items())
        print(f"{r['label']:<11} {args.pods:>5} {r['seconds']:>9.2f} {r['claims']:>10} {r['peak']:>5} "
              f"{r['nodes_used']:>5} {r['empty']:>5} {r['minimum']:>7} {r['ratio']:>5.2f}x {r['gpus']:>5}  {requests}")
    for r in runs:
        types = ", ".join(f"{n} {t}" for t, n in sorted(r["instance_types"].items()))
        line = (f"  {r['label']}: creates done {r['create_s']:.2f} s, NodeClaims created {r['first_claim_s']:.2f}-"
                f"{r['last_claim_s']:.2f} s ({r['first_wave']} in the first second); "
                f"{types}; overlay applied to {r['overlay_applied']} of {r['claims']} claims; "
                f"at most {r['most_per_node']} pods a node, {r['overcommitted']} nodes holding more than their "
                f"allocatable {EXTENDED}")
        if r["left_after_settle"] is not None:
            line += (f"; {r['left_after_settle']} NodeClaims left {args.settle:g} s after the last bind"
                     f" ({r['launched_during_settle']} launched meanwhile)")
        print(line)
    saved = without["claims"] - with_overlay["claims"]
    ratio = without["claims"] / with_overlay["claims"]
    print(f"overlay saves {saved} nodes: no overlay / overlay = {ratio:.2f}x NodeClaims launched "
          f"({without['gpus']} vs {with_overlay['gpus']} physical GPUs)")
    print(json.dumps({"bench": "karpenter", "pods": args.pods, "replicas": args.replicas,
                      "max_nodes": args.max_nodes, "cpus": os.cpu_count(), "total_s": round(total, 1),
                      "runs": {r["label"]: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()
                                            if k not in ("label", "finished")} for r in runs},
                      "saved_nodes": saved, "ratio_no_overlay_to_overlay": round(ratio, 3)}))
    if without["overlay_applied"]:  # Karpenter had not dropped the overlay yet: run B measured nothing
        print(f"targets: NOT MET (the overlay still applied to {without['overlay_applied']} claims of the run "
              "without it)")
        return 1
    ok = not args.max_ratio or with_overlay["ratio"] <= args.max_ratio
    if args.max_ratio:
        print(f"targets: {'MET' if ok else 'NOT MET'} (all bound, overlay run <= {args.max_ratio:g}x the minimum)")
    else:
        print("targets: all bound (ratios report only)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
