"""Labels and taints on many nodes: one list, then one patch per node that differs, in parallel.

kubectl taints and labels node by node and command by command; gpuctl observes all nodes with
one LIST, computes each node's difference, and sends a single merge patch only where there is one.
A converged cluster therefore costs one read and zero writes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.objects import MERGE_PATCH
from gpuctl.model import labels as L
from gpuctl.model.taints import Taint

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

WORKERS = 16


@dataclass(frozen=True)
class NodeUpdate:
    nodes: int  # nodes matched
    patched: int  # nodes written


def node_patch(node: dict[str, Any], labels: dict[str, str | None], taints: tuple[Taint, ...]) -> dict[str, Any] | None:
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


def patch_nodes(v1: CoreV1Api, nodes: list[dict[str, Any]], labels: dict[str, str | None],
                taints: tuple[Taint, ...] = ()) -> NodeUpdate:
    """Bring `nodes` (as observed, JSON) to these labels and taints: one merge patch per node that differs."""
    patches = [(n["metadata"]["name"], p) for n in nodes if (p := node_patch(n, labels, taints)) is not None]

    def send(item: tuple[str, dict[str, Any]]) -> None:
        # The patched Node is not needed: skipping its deserialisation halves the cost per node.
        v1.patch_node(item[0], item[1], field_manager=L.MANAGER, _content_type=MERGE_PATCH,
                      _preload_content=False).drain_conn()

    with requesting("patching nodes"), ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(send, patches))
    return NodeUpdate(nodes=len(nodes), patched=len(patches))


def converge_nodes(v1: CoreV1Api, selector: str, labels: dict[str, str | None],
                   taints: tuple[Taint, ...] = ()) -> NodeUpdate:
    """patch_nodes over the nodes matching `selector`, observed with one LIST."""
    return patch_nodes(v1, list_nodes_json(v1, selector), labels, taints)


def list_nodes_json(v1: CoreV1Api, selector: str) -> list[dict[str, Any]]:
    """Nodes as plain JSON: at a thousand nodes, building typed models costs more than the LIST itself."""
    with requesting(f"listing nodes {selector}"):
        return json.loads(v1.list_node(label_selector=selector, _preload_content=False).data)["items"]
