"""Schedule 1,000 single-GPU pods on 125 sim nodes: DRA (claims, and unmodified pods) against the extended resource.

Issue 12: claims for 1,000 GPUs on 125 sim nodes (8 A100s each), timed from creating the claims' pods to
all pods bound and all claims allocated, against as many pods asking for nvidia.com/gpu: 1 on the same nodes.
Both sides: the same pods (busybox, tolerating the GPU nodes' taint, no service account token) created by
the same pool of client threads; the clock (time.perf_counter) starts before the first create and stops
when a watch has seen the last pod bound (spec.nodeName) and, for DRA, the last claim allocated. kwok moves
bound pods to Running and they stay there (gpuctl's kwok Stages complete only the CUDA samples the
simulated operator annotates, and it is idle without a ClusterPolicy), so no GPU is freed while the clock
runs; every pod must get one GPU: --pods <= nodes x GPUs.

- DRA: the DeviceClasses of NVIDIA's DRA driver chart (v0.4.1, rendered by the real helm), the
  ResourceSlices the driver's kubelet plugin would publish (gpuctl.simulator.dra), one
  ResourceClaimTemplate (deviceClassName gpu.nvidia.com, 1 device); each pod gets its own claim from it
  (kube-controller-manager's resourceclaim controller) and kube-scheduler allocates it. Checked after:
  every claim allocated, reserved for its pod, on its pod's node, no device twice.
- DRA, unmodified pods: the same DRA nodes and classes, no template; each pod asks for nvidia.com/gpu: 1,
  which the nodes do not advertise, so kube-scheduler serves it from the gpu.nvidia.com class's
  extendedResourceName (KEP-5004, GA in 1.37): it makes the pod's claim itself and allocates it. This is how
  gpuctl's DRA mode serves a workload as written. Checked after as the DRA side.
- Extended resource: the nodes advertise nvidia.com/gpu=8 (node status, as the device plugin leaves
  it); checked after: no node holds more pods than it has GPUs.

The sides never share a cluster: each gets a fresh sim cluster of the same shape (same node names,
labels, taints, capacity), one after the other (never both at once: they would compete for the CPUs),
and the cluster goes before the next one starts. So no node is served by both; the extended-resource
cluster is a device-plugin cluster with no DRA object at all (the chart's gpu.nvidia.com DeviceClass sets
extendedResourceName nvidia.com/gpu: on Kubernetes 1.36 the scheduler would serve nvidia.com/gpu from
ResourceSlices on a node that does not advertise it); neither side inherits the other's objects, etcd
history or caches, and no clean-up has to finish in between. Before the clock starts, one warm-up pod of
the side's kind is scheduled and deleted (with its claim): the control plane has seen the nodes, slices
and classes, and first-request costs are paid on both sides alike.

What bounds the figures: at the components' default client rates (kube-scheduler 50 QPS, kube-controller-manager
20 QPS) their own rate limiters. Per DRA pod kube-scheduler writes five requests (nominatedNodeName, the claim
twice, the Binding, an Event) against two for the extended resource, kube-controller-manager two (the claim,
the pod's resourceClaimStatuses). At the rates the sim runs (templates/sim/kwokctl.yaml.j2: those of Kubernetes'
DRA scalability jobs) the CPUs: each side reports the CPU seconds every process used while timed (the cluster's
from /proc, this process's own), against what the CPUs offered. Kubernetes' own scheduler benchmark shows the
same gap at the scheduler alone: v1.37.2 test/integration/scheduler_perf holds SchedulingBasic at 5,000 nodes
to at least 680-790 pods/s and SchedulingWithResourceClaimTemplate (5,000 pods, 500 nodes) to 56 ("typically
above 70"), its ExtendedResource cases to 120-130 (misc/ and dra/performance-config.yaml).

Usage: .venv/bin/python -m bench.dra [--nodes N] [--gpus-per-node G] [--pods P] [--workers W] [--max-ratio X]
Exit status 1 when DRA claims take more than --max-ratio times the extended-resource side (default: issue 32's
1.5x from 1,000 pods, report only below). CI runs it small (tests/integration/test_bench.py: --nodes 4 --pods 32),
so it cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench import support
from bench.support import APPLY_PATCH, MERGE_PATCH, log

CHART = support.ROOT.parent / "shared" / "upstream" / "dra-driver-nvidia-gpu-v0.4.1" / "dra-driver-nvidia-gpu"
GPU = "a100-40gb"
GROUP = "gpu"
NS = "bench"
TEMPLATE = "one-gpu"
TARGET_RATIO, TARGET_PODS = 1.5, 1000  # issue 32: DRA claims within 1.5x of the extended resource at 1,000 pods
EXTENDED = "nvidia.com/gpu"


def render_device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses of the DRA driver's real chart, rendered by the real helm for a v1.36 cluster
    serving resource.k8s.io/v1 (as tests/integration/test_sim_dra.py renders them)."""
    import yaml

    if not CHART.is_dir():
        sys.exit(f"upstream chart missing: {CHART}")
    helm = support.tool_path("helm")
    out = subprocess.run([str(helm), "template", "dra", str(CHART), "--namespace", "nvidia-dra-driver-gpu",
                          # the chart refuses resources.gpus.enabled without it (templates/validation.yaml:33-43)
                          "--set", "gpuResourcesEnabledOverride=true",
                          "--kube-version", support.kubernetes_version(), "--api-versions", "resource.k8s.io/v1"],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "DeviceClass"]


@dataclass(frozen=True)
class Side:
    """One side of the comparison: whether DRA serves the nodes' GPUs, and whether each pod names a claim
    template (else it asks for nvidia.com/gpu: 1, which on DRA nodes the scheduler serves from the
    gpu.nvidia.com class's extendedResourceName: KEP-5004, GA in 1.37)."""

    cluster: str
    label: str
    dra: bool
    claims: bool


EXTENDED_SIDE = Side("bench-extended", f"extended resource {EXTENDED}", dra=False, claims=False)
CLAIMS_SIDE = Side("bench-dra", "DRA claims (gpu.nvidia.com)", dra=True, claims=True)
UNMODIFIED_SIDE = Side("bench-dra-extended", f"DRA, pods asking {EXTENDED}", dra=True, claims=False)


def render_pod(name: str, claims: bool, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """One single-GPU pod: a claim from TEMPLATE (claims) or a limit of nvidia.com/gpu: 1."""
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}
    spec: dict[str, Any] = {"tolerations": tolerations, "automountServiceAccountToken": False,
                            "terminationGracePeriodSeconds": 0, "containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        container["resources"] = {"limits": {EXTENDED: "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


@dataclass
class Seen:
    """What the watches saw: when each pod was first bound (and where), each claim first seen and allocated."""

    pods: int
    dra: bool
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (time, node)
    made: dict[str, float] = field(default_factory=dict)  # claim -> time first seen
    allocated: dict[str, float] = field(default_factory=dict)  # claim -> time
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check_done(self) -> None:
        if len(self.bound) >= self.pods and (not self.dra or len(self.allocated) >= self.pods):
            self.done.set()


def watch(list_call: Any, resource_version: str, seen: Seen, stop: threading.Event, on_object: Any) -> None:
    """Follow a namespaced LIST's watch from `resource_version`, calling on_object(object, time received) for each
    added or modified object, until `stop`."""
    try:
        for kind, obj, now in support.watch_events(partial(list_call, NS), resource_version, stop):
            if kind != "DELETED":
                with seen.lock:
                    on_object(obj, now)
                    seen.check_done()
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        seen.error = exc
        seen.done.set()


def on_pod(seen: Seen, names: set[str]) -> Any:
    def record(obj: dict[str, Any], now: float) -> None:
        name, node = obj["metadata"]["name"], obj["spec"].get("nodeName")
        if node and name in names and name not in seen.bound:
            seen.bound[name] = (now, node)
    return record


def on_claim(seen: Seen) -> Any:
    def record(obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        seen.made.setdefault(name, now)
        if (obj.get("status") or {}).get("allocation") and name not in seen.allocated:
            seen.allocated[name] = now
    return record


def wait_until(what: str, check: Any, timeout: float) -> None:
    support.wait_until("bench.dra", what, check, timeout, every=0.1)


def prepare(client: Any, side: Side, nodes: list[str], gpus: int, classes: list[dict[str, Any]],
            workers: int) -> None:
    """Make the nodes serve GPUs the side's way, and the namespace (with its default ServiceAccount)."""
    from kubernetes.client import CoreV1Api, ResourceV1Api

    v1, resource = CoreV1Api(client), ResourceV1Api(client)
    v1.create_namespace({"metadata": {"name": NS}})
    if side.dra:
        for dc in classes:
            resource.patch_device_class(dc["metadata"]["name"], dc, field_manager="gpuctl", force=True,
                                        _content_type=APPLY_PATCH)
        support.publish_dra_slices(client)
        slices = json.loads(resource.list_resource_slice(_preload_content=False).data)["items"]
        if {s["spec"]["nodeName"] for s in slices} != set(nodes):
            sys.exit("bench.dra: the ResourceSlices do not cover the GPU nodes")
    if side.claims:
        resource.create_namespaced_resource_claim_template(NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [support.one_gpu_request("gpu")]}}}})
    if not side.dra:  # the device plugin's way: the nodes advertise the extended resource
        status = {"status": {"capacity": {EXTENDED: str(gpus)}, "allocatable": {EXTENDED: str(gpus)}}}
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda n: v1.patch_node_status(n, status, _content_type=MERGE_PATCH,
                                                         _preload_content=False).drain_conn(), nodes))
    wait_until("the namespace's default ServiceAccount", lambda: bool(
        v1.list_namespaced_service_account(NS, field_selector="metadata.name=default").items), 60)


def warm_up(client: Any, side: Side, tolerations: list[dict[str, str]]) -> None:
    """Schedule one pod of the side's kind and delete it, with its claim: the control plane serves the side."""
    from kubernetes.client import CoreV1Api, ResourceV1Api

    v1, resource = CoreV1Api(client), ResourceV1Api(client)
    v1.create_namespaced_pod(NS, render_pod("warm-up", side.claims, tolerations), _preload_content=False).drain_conn()
    wait_until("the warm-up pod bound", lambda: bool(v1.read_namespaced_pod("warm-up", NS).spec.node_name), 120)
    v1.delete_namespaced_pod("warm-up", NS, grace_period_seconds=0, _preload_content=False).drain_conn()
    wait_until("the warm-up pod and its claim gone", lambda: not v1.list_namespaced_pod(NS).items
               and not resource.list_namespaced_resource_claim(NS).items, 120)


def verify(client: Any, seen: Seen, gpus: int) -> None:
    """Every pod on a node with a GPU for it: per node at most `gpus` pods; for DRA, every claim
    allocated from its pod's node, reserved for its pod, each device once."""
    per_node = Counter(node for _, node in seen.bound.values())
    if max(per_node.values()) > gpus:
        sys.exit(f"bench.dra: a node holds more pods than GPUs: {per_node.most_common(1)}")
    if not seen.dra:
        return
    from kubernetes.client import ResourceV1Api

    claims = json.loads(ResourceV1Api(client).list_namespaced_resource_claim(NS, _preload_content=False).data)["items"]
    devices = set()
    for c in claims:
        pod = c["metadata"]["ownerReferences"][0]["name"]
        status = c.get("status") or {}
        [result] = status["allocation"]["devices"]["results"]
        if [r["name"] for r in status.get("reservedFor") or []] != [pod] or result["pool"] != seen.bound[pod][1]:
            sys.exit(f"bench.dra: claim {c['metadata']['name']} is not reserved for {pod} on its node: {status}")
        devices.add((result["pool"], result["device"]))
    if len(claims) != seen.pods or len(devices) != seen.pods:
        sys.exit(f"bench.dra: {len(claims)} claims, {len(devices)} distinct devices for {seen.pods} pods")


def run_side(side: Side, args: argparse.Namespace, classes: list[dict[str, Any]]) -> dict[str, Any]:
    """One side on a fresh sim cluster: seconds to all bound (and allocated), to all created, to the last
    claim made (DRA), and the median create->bound seconds of a pod."""
    from kubernetes.client import CoreV1Api, ResourceV1Api

    name, dra = side.cluster, side.dra
    spec = support.node_group(GROUP, GPU, args.nodes, args.gpus_per_node)
    tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in spec.taints]
    nodes = [support.sim_node_name(GROUP, i) for i in range(args.nodes)]
    started = time.perf_counter()
    support.create_sim_cluster(name)
    try:
        support.add_sim_nodes(name, spec)
        client = support.api_client(support.sim_kubeconfig(name))
        v1, resource = CoreV1Api(client), ResourceV1Api(client)
        prepare(client, side, nodes, args.gpus_per_node, classes, args.workers)
        warm_up(client, side, tolerations)
        log(f"{name}: sim cluster, {args.nodes} GPU nodes, {side.label} ready in "
            f"{time.perf_counter() - started:.1f}s; creating {args.pods} pods")

        names = [f"gpu-{i:04d}" for i in range(args.pods)]
        seen, stop = Seen(args.pods, dra), threading.Event()
        watches = [(v1.list_namespaced_pod, on_pod(seen, set(names)))]
        if dra:
            watches.append((resource.list_namespaced_resource_claim, on_claim(seen)))
        threads = []
        for list_call, record in watches:
            rv = json.loads(list_call(NS, _preload_content=False).data)["metadata"]["resourceVersion"]
            threads.append(threading.Thread(target=watch, args=(list_call, rv, seen, stop, record), daemon=True))
        for t in threads:
            t.start()
        bodies = [render_pod(n, side.claims, tolerations) for n in names]
        created: dict[str, float] = {}

        def create(body: dict[str, Any]) -> None:
            v1.create_namespaced_pod(NS, body, _preload_content=False).drain_conn()
            created[body["metadata"]["name"]] = time.perf_counter()

        cpu_before, bench_cpu = support.sim_cpu_seconds(name), time.process_time()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            list(pool.map(create, bodies))
        all_created = time.perf_counter()
        finished = seen.done.wait(args.timeout)
        stop.set()
        if seen.error is not None:
            raise seen.error
        if not finished:
            sys.exit(f"bench.dra: {name}: after {args.timeout:.0f}s {len(seen.bound)} of {args.pods} pods bound"
                     + (f", {len(seen.allocated)} claims allocated" if dra else ""))
        end = max([t for t, _ in seen.bound.values()] + list(seen.allocated.values()))
        cpu = {c: v - cpu_before.get(c, 0.0) for c, v in support.sim_cpu_seconds(name).items()}
        cpu["bench.dra"] = time.process_time() - bench_cpu  # its client threads and watches
        verify(client, seen, args.gpus_per_node)
        latency = statistics.median(max(0.0, seen.bound[n][0] - created[n]) for n in names)
        return {"seconds": end - t0, "create_s": all_created - t0, "median_latency_s": latency,
                "claims_made_s": max(seen.made.values()) - t0 if dra else 0.0, "cpu": cpu}
    finally:
        support.delete_sim_cluster(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=None, help="single-GPU pods (default: nodes x GPUs per node)")
    parser.add_argument("--workers", type=int, default=16, help="client threads creating pods, both sides")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds each side may take")
    parser.add_argument("--max-ratio", type=float, default=None,
                        help=f"exit 1 when DRA takes longer than this many times the extended resource (default "
                             f"{TARGET_RATIO:g} from {TARGET_PODS} pods, else report only; 0: report only)")
    args = parser.parse_args()
    if args.pods is None:
        args.pods = args.nodes * args.gpus_per_node
    if args.max_ratio is None:
        args.max_ratio = TARGET_RATIO if args.pods >= TARGET_PODS else 0.0
    if min(args.nodes, args.gpus_per_node, args.pods, args.workers) < 1:
        parser.error("--nodes, --gpus-per-node, --pods and --workers must be >= 1")
    if args.pods > args.nodes * args.gpus_per_node:
        parser.error(f"--pods {args.pods} is more than the {args.nodes * args.gpus_per_node} GPUs of the nodes")

    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as tmp:
        os.environ["GPUCTL_STATE_DIR"] = tmp
        classes = render_device_classes()
        extended = run_side(EXTENDED_SIDE, args, classes)
        claims = run_side(CLAIMS_SIDE, args, classes)
        unmodified = run_side(UNMODIFIED_SIDE, args, classes)

    ratio = claims["seconds"] / extended["seconds"]
    unmodified_ratio = unmodified["seconds"] / extended["seconds"]
    gpus = args.nodes * args.gpus_per_node
    print(f"{args.pods} single-GPU pods on {args.nodes} sim nodes x {args.gpus_per_node} GPUs ({gpus} GPUs), "
          f"{args.workers} client threads, {os.cpu_count()} CPUs")
    sides = ((EXTENDED_SIDE, extended), (CLAIMS_SIDE, claims), (UNMODIFIED_SIDE, unmodified))
    for side, figures in sides:
        print(f"{side.label:<34} {figures['seconds']:7.2f} s  {args.pods / figures['seconds']:7.1f} pods/s  "
              f"(creates done {figures['create_s']:.2f} s, median create->bound {figures['median_latency_s']:.2f} s)")
        if side.dra:
            maker = "kube-controller-manager's resourceclaim controller" if side.claims else "kube-scheduler"
            print(f"{'  last claim made':<34} {figures['claims_made_s']:7.2f} s  ({maker})")
    for side, figures in sides:
        print(f"  {side.label}: {support.cpu_report(figures['cpu'], figures['seconds'])}")
    limit = f"limit {args.max_ratio:g}x" if args.max_ratio else "report only"
    print(f"{'ratio DRA claims / extended':<34} {ratio:7.2f}x  ({limit})")
    print(f"{'ratio DRA unmodified / extended':<34} {unmodified_ratio:7.2f}x")
    print(json.dumps({"bench": "dra", "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "pods": args.pods,
                      "workers": args.workers, "cpus": os.cpu_count(),
                      "extended_s": round(extended["seconds"], 3), "dra_s": round(claims["seconds"], 3),
                      "dra_unmodified_s": round(unmodified["seconds"], 3),
                      "dra_claims_made_s": round(claims["claims_made_s"], 3),
                      "extended_pods_per_s": round(args.pods / extended["seconds"], 1),
                      "dra_pods_per_s": round(args.pods / claims["seconds"], 1), "ratio": round(ratio, 3),
                      "unmodified_ratio": round(unmodified_ratio, 3),
                      "extended_cpu_s": round(sum(extended["cpu"].values()), 1),
                      "dra_cpu_s": round(sum(claims["cpu"].values()), 1),
                      "dra_unmodified_cpu_s": round(sum(unmodified["cpu"].values()), 1)}))
    ok = not args.max_ratio or ratio <= args.max_ratio
    print(f"targets: {'MET' if ok else 'NOT MET'}" if args.max_ratio else "targets: none (report only)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
