"""Labels and taints on many nodes: one list, then one patch per node that differs, in parallel.

kubectl taints and labels node by node and command by command; gpuctl observes all nodes with
one LIST, computes each node's difference, and sends a single merge patch only where there is one.
A converged cluster therefore costs one read and zero writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.taints import Taint

WORKERS = 16


@dataclass(frozen=True)
class NodeUpdate:
    nodes: int  # nodes matched
    patched: int  # nodes written


def node_patch(node: Mapping[str, Any], labels: dict[str, str | None], taints: tuple[Taint, ...],
               record: bool = False) -> dict[str, Any] | None:
    """The merge patch that brings `node` (a Node as JSON) to these labels (None: absent) and taints, or None.
    `record`: they are the node's group's whole set (configure-nodes): what the node's L.APPLIED annotation says
    gpuctl set before and the set leaves out is removed too, and the annotation records the set."""
    applied = _applied(node) if record else {"labels": [], "taints": []}
    labels = {**{k: None for k in applied["labels"]}, **labels}  # dropped from the set: taken off
    current = node["metadata"].get("labels") or {}
    label_diff = {k: v for k, v in labels.items() if current.get(k) != v}
    patch: dict[str, Any] = {}
    if label_diff:
        patch["metadata"] = {"labels": label_diff}
    existing = [{"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]}
                for t in (node.get("spec") or {}).get("taints") or []]
    wanted = [t.as_dict() | {"value": t.value} for t in taints]
    # A taint is identified by key and effect; keep everyone else's, replace ours, drop those we set and no longer want.
    ours = {(w["key"], w["effect"]) for w in wanted} | {tuple(t.split(":", 1)) for t in applied["taints"]}
    merged = [t for t in existing if (t["key"], t["effect"]) not in ours]
    merged += wanted
    if sorted(map(_taint_key, merged)) != sorted(map(_taint_key, existing)):
        patch["spec"] = {"taints": [{k: v for k, v in t.items() if v} for t in merged]}
    if record:
        now = json.dumps({"labels": sorted(k for k, v in labels.items() if v is not None),
                          "taints": sorted(f"{w['key']}:{w['effect']}" for w in wanted)}, separators=(",", ":"))
        if ((node["metadata"].get("annotations") or {}).get(L.APPLIED)) != now:
            patch.setdefault("metadata", {})["annotations"] = {L.APPLIED: now}
    return patch or None


def _applied(node: Mapping[str, Any]) -> dict[str, list[str]]:
    """The labels and taints the node's annotation says its group last set (none where it has none, or one not
    of gpuctl's shape: nothing is taken off on its word)."""
    try:
        found = json.loads((node["metadata"].get("annotations") or {}).get(L.APPLIED) or "{}")
        return {k: [v for v in found.get(k, []) if isinstance(v, str)] for k in ("labels", "taints")}
    except (ValueError, AttributeError, TypeError):
        return {"labels": [], "taints": []}


def _taint_key(taint: dict[str, str]) -> tuple[str, str, str]:
    return taint["key"], taint.get("value") or "", taint["effect"]


def patch_nodes(kube: Kube, nodes: Sequence[Mapping[str, Any]], labels: dict[str, str | None],
                taints: tuple[Taint, ...] = (), record: bool = False) -> NodeUpdate:
    """Bring `nodes` (as observed, JSON) to these labels and taints: one merge patch per node that differs
    (`record`: node_patch's)."""
    patches = [(n["metadata"]["name"], p) for n in nodes if (p := node_patch(n, labels, taints, record)) is not None]

    def send(item: tuple[str, dict[str, Any]]) -> None:
        kube.patch("v1", "Node", item[0], item[1])

    with requesting("patching nodes"), ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(send, patches))
    return NodeUpdate(nodes=len(nodes), patched=len(patches))


def converge_nodes(kube: Kube, selector: str, labels: dict[str, str | None],
                   taints: tuple[Taint, ...] = ()) -> NodeUpdate:
    """patch_nodes over the nodes matching `selector`, observed with one LIST: a node group's whole set of labels
    and taints, recorded on each node (node_patch's `record`)."""
    return patch_nodes(kube, list_nodes_json(kube, selector), labels, taints, record=True)


def list_nodes_json(kube: Kube, selector: str) -> list[KubeObject]:
    """The nodes `selector` matches ("": every node), in one LIST, as JSON: the one way gpuctl lists nodes
    (gpu_nodes.gpu_nodes narrows it to the GPU nodes). At a thousand nodes JSON costs a fraction of typed
    models."""
    return kube.list("v1", "Node", labels=selector, what=f"listing nodes {selector}")
