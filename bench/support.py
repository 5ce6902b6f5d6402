"""The benchmarks' test support: what they need of gpuctl that `gpuctl.api` does not offer.

This is the one module of bench/ that may import below `gpuctl.api`; pyproject.toml's contract "the benchmarks
use gpuctl.api and bench.support" names each import it makes. Every gpuctl import is inside the function that
needs it, so that a benchmark's process loads only what it runs: bench.scale times its gpuctl process from its
first line, imports included, as kubectl's are.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.model.catalog import GpuModel
    from gpuctl.model.spec import NodeGroupSpec
    from gpuctl.model.taints import Taint

ROOT = Path(__file__).resolve().parent.parent
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply
MERGE_PATCH = "application/merge-patch+json"


def gpuctl(*args: str) -> list[str]:
    """The argv of a gpuctl command run as a user runs it, in its own process."""
    return [sys.executable, "-m", "gpuctl", *args]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tool_path(name: str) -> Path:
    """The pinned tool `name` (kubectl, helm), installed into the user cache where it is not there yet."""
    from gpuctl.tools.installer import ensure_tools

    return ensure_tools([name])[0].path


def kubernetes_version() -> str:
    """The Kubernetes version the sim runs (what `helm template --kube-version` is told)."""
    from gpuctl.tools.pins import KUBERNETES_VERSION

    return KUBERNETES_VERSION


def gpu(name: str) -> GpuModel:
    """The catalog's GPU model `name` (t4, a100-40gb)."""
    from gpuctl.model.catalog import get_gpu

    return get_gpu(name)


def node_group(name: str, gpu_name: str, nodes: int, gpus_per_node: int,
               taints: tuple[Taint, ...] | None = None) -> NodeGroupSpec:
    """A node group's spec; `taints` None: the default GPU taint."""
    from gpuctl.model.spec import NodeGroupSpec

    if taints is None:
        return NodeGroupSpec(name, gpu(gpu_name), nodes, gpus_per_node)
    return NodeGroupSpec(name, gpu(gpu_name), nodes, gpus_per_node, taints=taints)


def plugin_config(replicas: int) -> str:
    """The device plugin's config file for `replicas` time-slices a GPU (1: no sharing)."""
    from gpuctl.model.sharing import NO_SHARING, Sharing, render_plugin_config

    return render_plugin_config(Sharing("time-slicing", replicas) if replicas > 1 else NO_SHARING)


def sim_node_name(group: str, index: int) -> str:
    """The name the sim gives node `index` of `group`."""
    from gpuctl.simulator.nodes import node_name

    return node_name(group, index)


def create_sim_cluster(name: str) -> None:
    """A sim cluster with no node and no GPU stack (`gpuctl cluster create` installs the stack)."""
    from gpuctl.providers.sim.provider import SimProvider

    SimProvider().ensure_cluster(name)


def add_sim_nodes(cluster: str, spec: NodeGroupSpec) -> None:
    """The group's nodes, Ready, as the cloud would make them: no gpuctl label, taint or config on them beyond
    the spec's (gpuctl.api.add_node_group also configures them)."""
    from gpuctl.providers.sim.provider import SimProvider

    SimProvider().ensure_node_group(cluster, spec)


def delete_sim_cluster(name: str) -> None:
    from gpuctl.providers.sim.provider import SimProvider

    SimProvider().delete_cluster(name)


def sim_kubeconfig(name: str) -> Path:
    """The sim cluster's own kubeconfig file."""
    from gpuctl.simulator.kwok import KwokCluster

    return KwokCluster(name).kubeconfig_path


def sim_cpu_seconds(name: str) -> dict[str, float]:
    """CPU seconds (user + system) each running process of sim cluster `name` has used since it started: its
    control-plane components and its simulated GPU operator, by component name (/proc/<pid>/stat)."""
    import os

    from gpuctl.simulator.kwok import KwokCluster

    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for component, pid in KwokCluster(name).pids().items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone: a component the supervisor restarts, or the cluster stopping
        used[component] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (proc(5), from field 3)
    return used


def cpu_report(used: dict[str, float], seconds: float) -> str:
    """One line: the CPU seconds used, by whom, against what the machine's CPUs offered in `seconds`."""
    import os

    cpus = os.cpu_count() or 1
    total = sum(used.values())
    parts = ", ".join(f"{name} {value:.0f}" for name, value in sorted(used.items(), key=lambda kv: -kv[1]) if value)
    offered = cpus * seconds
    return f"CPU {total:.0f} s of the {offered:.0f} s {cpus} CPUs offered ({100 * total / offered:.0f} %): {parts}"


def api_client(kubeconfig: Path) -> ApiClient:
    """A Kubernetes client as gpuctl makes it (deadlines, a connection pool for its worker threads)."""
    from gpuctl.kube.client import api_client as make

    return make(kubeconfig)


def exists(read: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether `read(*args, **kwargs)` finds its object: that client raises gpuctl's typed errors, a 404 as
    KubeNotFound (kubernetes' ApiException never reaches the caller)."""
    from gpuctl.kube.client import get_or_none

    return get_or_none(read, *args, **kwargs) is not None


def publish_dra_slices(client: ApiClient) -> None:
    """The ResourceSlices the DRA driver's kubelet plugin would publish for every GPU node."""
    from gpuctl.kube.kube import Kube
    from gpuctl.simulator.dra import publish_slices

    publish_slices(Kube(client))


def one_gpu_request(name: str) -> dict[str, Any]:
    """A DRA device request for one full GPU of the driver's gpu.nvidia.com class."""
    from gpuctl.model.dra import GPU_CLASS, device_request

    return device_request(name, GPU_CLASS)


def ensure_sim_monitoring(cluster: str, timeout: float) -> str:
    """The sim's DCGM exporter and Prometheus, running; Prometheus's URL."""
    from gpuctl.simulator.prometheus import ensure_monitoring

    return ensure_monitoring(cluster, timeout=timeout)


def configure_gpu_nodes(client: ApiClient, selector: str, replicas: int) -> None:
    """What `gpuctl apply` does to a group's nodes for time-slicing x`replicas`, and nothing else: taints, the
    device-plugin config label (one patch per node that differs) and the device plugin's ConfigMap."""
    from gpuctl.kube.kube import Kube
    from gpuctl.model.sharing import Sharing
    from gpuctl.model.spec import GroupPlan, PlatformSpec
    from gpuctl.model.stack_spec import StackSpec
    from gpuctl.model.taints import DEFAULT_GPU_TAINTS
    from gpuctl.ops.platform.gpu_config import write_gpu_config
    from gpuctl.ops.platform.nodes import configure_nodes

    kube = Kube(client)
    sharing = Sharing("time-slicing", replicas)
    configure_nodes(kube, selector, sharing, DEFAULT_GPU_TAINTS)
    group = GroupPlan(node_group("gpu", "t4", 0, 1), sharing)
    stack = StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS, shares_gpus=True)
    write_gpu_config(kube, PlatformSpec("bench", "sim", (group,), stack))


WATCH_S = 60  # one watch request's timeoutSeconds; it is opened again from the last resourceVersion


def watch_events(list_call: Any, resource_version: str,
                 stop: threading.Event) -> Iterator[tuple[str, dict[str, Any], float]]:
    """Follow a LIST's watch (`list_call(watch=True, ...)`, raw JSON, no typed models) from `resource_version` until
    `stop`: (type, object, time received) for each ADDED, MODIFIED or DELETED event; an ERROR event raises."""
    from kubernetes.watch.watch import iter_resp_lines

    while not stop.is_set():
        resp = list_call(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                         timeout_seconds=WATCH_S, _preload_content=False)
        try:
            for line in iter_resp_lines(resp):
                now = time.perf_counter()
                if not line:
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch failed: {obj.get('message', obj)}")
                resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    yield event["type"], obj, now
                if stop.is_set():
                    break
        finally:
            resp.release_conn()


def wait_until(bench: str, what: str, check: Any, timeout: float, every: float) -> None:
    """Poll `check()` every `every` seconds until it holds; after `timeout`, end the benchmark `bench` naming `what`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"{bench}: {what} not reached after {timeout:.0f}s")
        time.sleep(every)
