"""Karpenter's real controller beside a sim cluster: sigs.k8s.io/karpenter's kwok cloud provider (pinned in
gpuctl/tools/pins.py, built by gpuctl/tools/gobuild.py), run out of cluster like the sim's Kueue.

The kwok provider "launches" an instance by creating a Node object itself (kwok/cloudprovider/cloudprovider.go
Create, toNode), annotated kwok.x-k8s.io/node=fake so that the sim's kwok controller keeps it Ready; it reads
its instance types from a JSON file (INSTANCE_TYPES_FILE_PATH), and every single-valued offering requirement
becomes a label of the node (docs/research/karpenter-kwok.md). gpuctl writes that file from its catalog: each
EC2 GPU type with Karpenter's own figures, the AWS GPU labels gpuctl's NodePools select on, and the labels
NFD and GPU Feature Discovery would give the node once it booted (the sim has no NFD/GFD of its own; its
fixed node groups get the same labels, nodes.py). How it runs (Karpenter v1.15.0,
pkg/operator/options/options.go, kwok/options/options.go):
- KUBECONFIG from the environment: the binary has no --kubeconfig flag.
- --disable-leader-election=true: out of cluster there is no namespace for its Lease.
- --feature-gates NodeOverlay=true: NodeOverlay is alpha and off by default; gpuctl's overlays are what
  size a shared node (stack/karpenter.py).
- metrics and health probe on free loopback ports (gpuctl's build patches the bind host to 127.0.0.1).
- It serves no webhooks in the kwok provider, so nothing calls back into it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpuctl.kube.objects import MANAGED
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS
from gpuctl.simulator.daemons import Daemon, apply_crds, free_port, missing_crds, wait_ready
from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.nodes import gpu_labels
from gpuctl.simulator.procs import flag, is_karpenter, read_argv
from gpuctl.stack.karpenter import NodeClass
from gpuctl.tools.installer import ensure_tools, find_tool
from gpuctl.util.errors import ClusterError
from gpuctl.util.files import write_atomic
from gpuctl.util.output import info

TOOL = "karpenter-kwok"
CRDS_DIR = "karpenter-crds"  # beside the binary in the tool cache (pins.py: the tool's extras)
KWOK_NODE_CLASS = NodeClass("karpenter.kwok.sh", "KWOKNodeClass")
ZONE = "sim-a"
READY_TIMEOUT_S = 120.0
# The sim's nodes are up at once; a cloud instance takes minutes. Karpenter consolidates an empty node after
# the NodePool's consolidateAfter: short on the sim, so that a test sees it.
CONSOLIDATE_AFTER = "30s"


def _dir(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "karpenter"


def _types_path(cluster: str) -> Path:
    return _dir(cluster) / "instance-types.json"


def log_path(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "logs" / "karpenter.log"


def instance_types() -> list[dict[str, Any]]:
    """The kwok provider's instance types (kwok/cloudprovider/helpers.go InstanceTypeOptions): every catalog EC2
    GPU type with an on-demand price. Capacity: Karpenter's vCPUs, memory and pods, and nvidia.com/gpu = the
    physical GPUs, as the AWS provider declares them; what a shared node advertises is a NodeOverlay's to say."""
    types = []
    for model in GPUS.values():
        for it in model.instance_types:
            if it.price is None:  # Karpenter's price list has none (p5e: capacity blocks only): not offered
                continue
            labels = {"karpenter.k8s.aws/instance-gpu-name": model.karpenter_name,
                      "karpenter.k8s.aws/instance-gpu-count": str(it.gpus),
                      "karpenter.k8s.aws/instance-gpu-memory": str(model.karpenter_memory_mib),
                      "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                      "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": ZONE,
                      **gpu_labels(model, it.gpus)}
            types.append({
                "name": it.name,
                "offerings": [{"Price": it.price, "Available": True,
                               "Requirements": [{"key": k, "operator": "In", "values": [v]}
                                                for k, v in labels.items()]}],
                "architecture": "amd64", "operatingSystems": ["linux"],
                "resources": {"cpu": str(it.cpu), "memory": f"{it.memory_mib}Mi", "pods": str(it.pods),
                              "ephemeral-storage": "500Gi", L.GPU_RESOURCE: str(it.gpus)},
            })
    return types


def render_kwok_node_class() -> dict[str, Any]:
    """The KWOKNodeClass gpuctl's NodePools launch from; Ready by its CRD's default status (kwoknodeclass.go)."""
    return {"apiVersion": f"{KWOK_NODE_CLASS.group}/v1alpha1", "kind": KWOK_NODE_CLASS.kind,
            "metadata": {"name": KWOK_NODE_CLASS.name, "labels": dict(MANAGED)}, "spec": {}}


def _argv(binary: Path, cluster: str, metrics: int, health: int) -> list[str]:
    return [str(binary), "--instance-types-file-path", str(_types_path(cluster)),
            "--disable-leader-election=true", "--feature-gates", "NodeOverlay=true",
            "--metrics-port", str(metrics), "--health-probe-port", str(health)]


def _daemon(cluster: str) -> Daemon:
    directory = KwokCluster(cluster).dir
    return Daemon(_dir(cluster) / "karpenter.pid", log_path(cluster), lambda argv: is_karpenter(argv, directory))


def get_karpenter_pid(cluster: str) -> int | None:
    return _daemon(cluster).pid()


def karpenter_drift(cluster: str) -> str | None:
    """What ensure_karpenter would change, read only (a plan's observation); None where it would change nothing."""
    tool = find_tool(TOOL)
    if tool is None:
        return "build Karpenter's kwok provider, apply its CRDs and start it beside the cluster"
    types = json.dumps(instance_types(), indent=1, sort_keys=True) + "\n"
    path = _types_path(cluster)
    if not path.exists() or path.read_text() != types:
        return "start Karpenter's kwok provider with the catalog's instance types"
    if not any(Path(p.argv[0]) == tool for p in _daemon(cluster).procs()):
        return "start Karpenter's kwok provider beside the cluster"
    if missing := missing_crds(cluster, tool.parent / CRDS_DIR):
        return f"apply Karpenter's CRDs {', '.join(sorted(missing))}"
    return None


def ensure_karpenter(cluster: str) -> bool:
    """Karpenter on a sim cluster: its CRDs, its instance types and its controller, ready; True if any of them
    was missing or out of date. Builds the tool on first use (minutes)."""
    [tool] = ensure_tools([TOOL], info)  # before the lock: a first build takes minutes
    missing = apply_crds(cluster, tool.path.parent / CRDS_DIR, "Karpenter")
    kwok = KwokCluster(cluster)
    with kwok.lock():
        if not kwok.complete:
            raise ClusterError(f"no sim cluster {cluster!r}",
                               f"create it: gpuctl cluster create --cloud sim --name {cluster}")
        types = json.dumps(instance_types(), indent=1, sort_keys=True) + "\n"
        path = _types_path(cluster)
        stale = not path.exists() or path.read_text() != types
        if stale:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(path, types)  # read once, at start: a new file needs a new process
        daemon = _daemon(cluster)
        current = daemon.keep(lambda p: Path(p.argv[0]) == tool.path and not stale)
        if current is None:
            daemon.start(_argv(tool.path, cluster, free_port(), free_port()),
                         dict(os.environ, KUBECONFIG=str(kwok.kubeconfig_path)))
    wait_for_karpenter(cluster)
    return missing or current is None


def wait_for_karpenter(cluster: str, timeout: float = READY_TIMEOUT_S) -> None:
    """Until Karpenter answers /readyz (its CRDs are served and its caches synced)."""
    pid = get_karpenter_pid(cluster)
    port = flag((read_argv(pid) or ()) if pid is not None else (), "--health-probe-port")
    wait_ready(f"http://127.0.0.1:{port}/readyz", lambda: get_karpenter_pid(cluster) is not None,
               f"Karpenter of sim cluster {cluster!r}", log_path(cluster), timeout)


def stop_karpenter(cluster: str) -> None:
    """Stop the cluster's Karpenter, whether or not its pid file names it (found through /proc)."""
    _daemon(cluster).stop()
