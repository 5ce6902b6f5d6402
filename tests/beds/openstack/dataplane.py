"""The bed's data plane, run by its Magnum driver (driver.py) as a subprocess of gpuctl's own venv:

    python -m tests.beds.openstack.dataplane create-cluster SIM --ca-cert F --ca-key F
    python -m tests.beds.openstack.dataplane nodes SIM NODEGROUP FLAVOR COUNT [--node-labels J --node-taints J]
    python -m tests.beds.openstack.dataplane delete-nodes SIM NODEGROUP
    python -m tests.beds.openstack.dataplane delete-cluster SIM

Each Magnum cluster is a gpuctl sim cluster (named by the driver, see driver.sim_name) whose pki is
issued by Magnum's cluster CA; the sim system node is Magnum's default-worker; a node group of a GPU
flavor is kwok GPU nodes of that GPU, labelled the way Magnum's Kubernetes drivers label their nodes.
Prints one JSON object on success; exits 1 with the error on stderr otherwise. GPUCTL_STATE_DIR
is the tests' (the driver passes the environment of the process that started the bed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The flavors and node labels are the same site's as the emulator's (fakes.py serves the flavors).
from tests.emulators.openstack.dataplane import FLAVORS, MAGNUM_NODEGROUP, MAGNUM_ROLE


def _core(sim: str):
    from kubernetes.client import CoreV1Api

    from tests.support.kube import api_client
    from tests.support.sim import KwokCluster

    return CoreV1Api(api_client(KwokCluster(sim).kubeconfig_path))


def _label(sim: str, node: str, nodegroup: str, labels: dict[str, str] | None = None) -> None:
    from tests.support.kube import MERGE_PATCH

    labels = {**(labels or {}), MAGNUM_NODEGROUP: nodegroup, MAGNUM_ROLE: "worker"}
    _core(sim).patch_node(node, {"metadata": {"labels": labels}}, _content_type=MERGE_PATCH)


def create_cluster(sim: str, ca_cert: Path, ca_key: Path) -> dict[str, object]:
    """The sim cluster on Magnum's CA, its system node labelled as default-worker."""
    from tests.support.sim import SYSTEM_NODE, KwokCluster, SimProvider
    from tests.support.tools import KUBERNETES_VERSION

    SimProvider(ca=(ca_cert.read_bytes(), ca_key.read_bytes())).ensure_cluster(sim)
    _label(sim, SYSTEM_NODE, "default-worker")
    return {"api_address": KwokCluster(sim).endpoint(), "coe_version": f"v{KUBERNETES_VERSION.lstrip('v')}"}


def ensure_nodes(sim: str, nodegroup: str, flavor_name: str, count: int, node_labels: dict[str, str],
                 node_taints: list[dict[str, str]]) -> dict[str, object]:
    """Converge a node group's kwok nodes to `count` (a CPU flavor has none beyond the system node). New
    nodes register with the group's node_taints; every node gets its node_labels and any node_taint it
    lacks (a taint dropped from the group stays on nodes that have it, as kubelet's registration taints do)."""
    from tests.support.kube import MERGE_PATCH
    from tests.support.model import NODEGROUP, NodeGroupSpec, Taint
    from tests.support.sim import SimProvider

    flavor = FLAVORS.get(flavor_name)
    if flavor is None:
        raise SystemExit(f"flavor {flavor_name!r} is not one of the bed's: {', '.join(FLAVORS)}")
    if flavor.gpu is None:
        return {"nodes": 0}
    if count == 0:
        return delete_nodes(sim, nodegroup)
    taints = tuple(Taint(t["key"], t.get("value") or "", t["effect"]) for t in node_taints)
    SimProvider().ensure_node_group(sim, NodeGroupSpec(nodegroup, flavor.gpu, count, flavor.gpus, taints=taints))
    v1 = _core(sim)
    nodes = v1.list_node(label_selector=f"{NODEGROUP}={nodegroup}").items
    for node in nodes:
        labels = node.metadata.labels or {}
        if labels.get(MAGNUM_NODEGROUP) != nodegroup or any(labels.get(k) != v for k, v in node_labels.items()):
            _label(sim, node.metadata.name, nodegroup, node_labels)
        present = {(t.key, t.effect) for t in node.spec.taints or []}
        missing = [t.as_dict() for t in taints if (t.key, t.effect) not in present]
        if missing:
            current = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints or []]
            v1.patch_node(node.metadata.name, {"spec": {"taints": current + missing}}, _content_type=MERGE_PATCH)
    return {"nodes": len(nodes)}


def delete_nodes(sim: str, nodegroup: str) -> dict[str, object]:
    from tests.support.model import NODEGROUP

    v1 = _core(sim)
    nodes = v1.list_node(label_selector=f"{NODEGROUP}={nodegroup}").items
    for node in nodes:
        v1.delete_node(node.metadata.name)
    return {"deleted": len(nodes)}


def delete_cluster(sim: str) -> dict[str, object]:
    from tests.support.sim import KwokCluster

    if KwokCluster(sim).exists:
        KwokCluster(sim).delete()
    return {"deleted": sim}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.beds.openstack.dataplane")
    ops = parser.add_subparsers(dest="op", required=True)
    op = ops.add_parser("create-cluster")
    op.add_argument("sim")
    op.add_argument("--ca-cert", type=Path, required=True)
    op.add_argument("--ca-key", type=Path, required=True)
    op = ops.add_parser("nodes")
    op.add_argument("sim")
    op.add_argument("nodegroup")
    op.add_argument("flavor")
    op.add_argument("count", type=int)
    op.add_argument("--node-labels", type=json.loads, default={})
    op.add_argument("--node-taints", type=json.loads, default=[])
    op = ops.add_parser("delete-nodes")
    op.add_argument("sim")
    op.add_argument("nodegroup")
    op = ops.add_parser("delete-cluster")
    op.add_argument("sim")
    args = parser.parse_args(argv)
    try:
        if args.op == "create-cluster":
            result = create_cluster(args.sim, args.ca_cert, args.ca_key)
        elif args.op == "nodes":
            result = ensure_nodes(args.sim, args.nodegroup, args.flavor, args.count, args.node_labels,
                                  args.node_taints)
        elif args.op == "delete-nodes":
            result = delete_nodes(args.sim, args.nodegroup)
        else:
            result = delete_cluster(args.sim)
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which fails the operation
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        print(f"{args.op} {args.sim}: {message}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
