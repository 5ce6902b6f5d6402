"""Labels and taints on many nodes: one list, then one patch per node that differs, in parallel.

kubectl taints and labels node by node and command by command; gpuctl observes all nodes with
one LIST, computes each node's difference, and sends a single merge patch only where there is one.
A converged cluster therefore costs one read and zero writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.taints import Taint

WORKERS = 16


@dataclass(frozen=True)
class NodeUpdate:
    nodes: int  # nodes matched
    patched: int  # nodes written


def node_patch(node: Mapping[str, Any], labels: dict[str, str | None],
               taints: tuple[Taint, ...]) -> dict[str, Any] | None:
    """The merge patch that brings `node` (a Node as JSON) to these labels (None: absent) and taints, or None."""
    current = node["metadata"].get("labels") or {}
    label_diff = {k: v for k, v in labels.items() if current.get(k) != v}
    patch: dict[str, Any] = {}
    if label_diff:
        patch["metadata"] = {"labels": label_diff}
    existing = [{"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]}
                for t in (node.get("spec") or {}).get("taints") or []]
    wanted = [t.as_dict() | {"value": t.value} for t in taints]
    # A taint is identified by key and effect; keep everyone else's, replace ours.
    merged = [t for t in existing if (t["key"], t["effect"]) not in {(w["key"], w["effect"]) for w in wanted}]
    merged += wanted
    if sorted(map(_taint_key, merged)) != sorted(map(_taint_key, existing)):
        patch["spec"] = {"taints": [{k: v for k, v in t.items() if v} for t in merged]}
    return patch or None


def _taint_key(taint: dict[str, str]) -> tuple[str, str, str]:
    return taint["key"], taint.get("value") or "", taint["effect"]


def patch_nodes(kube: Kube, nodes: Sequence[Mapping[str, Any]], labels: dict[str, str | None],
                taints: tuple[Taint, ...] = ()) -> NodeUpdate:
    """Bring `nodes` (as observed, JSON) to these labels and taints: one merge patch per node that differs."""
    patches = [(n["metadata"]["name"], p) for n in nodes if (p := node_patch(n, labels, taints)) is not None]

    def send(item: tuple[str, dict[str, Any]]) -> None:
        kube.patch("v1", "Node", item[0], item[1])

    with requesting("patching nodes"), ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(send, patches))
    return NodeUpdate(nodes=len(nodes), patched=len(patches))


def converge_nodes(kube: Kube, selector: str, labels: dict[str, str | None],
                   taints: tuple[Taint, ...] = ()) -> NodeUpdate:
    """patch_nodes over the nodes matching `selector`, observed with one LIST."""
    return patch_nodes(kube, list_nodes_json(kube, selector), labels, taints)


def list_nodes_json(kube: Kube, selector: str) -> list[KubeObject]:
    """The nodes `selector` matches ("": every node), in one LIST, as JSON: the one way gpuctl lists nodes
    (gpu_nodes.gpu_nodes narrows it to the GPU nodes). At a thousand nodes JSON costs a fraction of typed
    models."""
    return kube.list("v1", "Node", labels=selector, what=f"listing nodes {selector}")
