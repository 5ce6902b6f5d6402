"""moto's EKS backend with sim clusters as its data plane.

moto's EKS makes clusters and node groups ACTIVE at once and runs nothing. Here its backend
methods are wrapped (moto's server runs in this process) so that, as on EKS:
- a new cluster is CREATING until a sim kube-apiserver, which authenticates EKS tokens through
  the TokenWebhook, is up with Karpenter's CRDs; then it is ACTIVE with that endpoint and CA;
- a node group is CREATING/UPDATING until its kwok GPU nodes (the GPU of its instance type) exist
  with EKS's labels and the group's labels and taints, which EKS applies at registration;
- deleting a node group or cluster goes through DELETING while its nodes or control plane go.
The work runs on background threads, one at a time; a failure makes the resource *_FAILED with
the reason in `health.issues`, where EKS reports it (`failures` injects one for a node group).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from kubernetes.client import CoreV1Api
from moto.eks.models import Cluster, EKSBackend, Nodegroup

from tests.emulators.eks.crds import install_karpenter_crds
from tests.emulators.eks.webhook import TokenWebhook
from tests.support.eks import EKS_EFFECTS, catalog_instance
from tests.support.kube import MERGE_PATCH, api_client, node_patch
from tests.support.model import NodeGroupSpec, Taint
from tests.support.model import labels as L
from tests.support.sim import KwokCluster, SimProvider
from tests.support.tools import KUBERNETES_VERSION

K8S_EFFECTS = {v: k for k, v in EKS_EFFECTS.items()}
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


def _failed(resource: Cluster | Nodegroup, status: str, exc: BaseException) -> None:
    resource.status = status
    # moto's Cluster declares no `health`; describe-cluster shows it once set, as EKS does
    resource.health = {  # type: ignore[union-attr]
        "issues": [{"code": "InternalFailure", "message": f"{type(exc).__name__}: {exc}"}]}


class SimDataPlane:
    """Patches moto's EKSBackend while installed; `writes` records each EKS write it saw."""

    def __init__(self, webhook: TokenWebhook, workdir: Path) -> None:
        self.webhook = webhook
        self.workdir = workdir
        self.writes: list[str] = []  # "create_cluster eks1", ... in call order
        self.clusters: set[str] = set()  # sim clusters made, for teardown
        # node group name -> (code, message): its creation fails the way EKS reports it
        self.failures: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()  # one data-plane change at a time, as one controller would
        self._threads: list[threading.Thread] = []
        self._patches: list[Any] = []

    def install(self) -> None:
        for name in ("create_cluster", "delete_cluster", "create_nodegroup", "update_nodegroup_config",
                     "delete_nodegroup"):
            patch = mock.patch.object(EKSBackend, name, self._wrap(name, getattr(EKSBackend, name)))
            patch.start()
            self._patches.append(patch)

    def uninstall(self) -> None:
        for patch in reversed(self._patches):
            patch.stop()
        self._patches.clear()

    def wait_idle(self, timeout: float = 120.0) -> None:
        for thread in list(self._threads):
            thread.join(timeout)

    def delete_sim_clusters(self) -> None:
        for name in sorted(self.clusters):
            KwokCluster(name).delete()
        self.clusters.clear()

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        handler = getattr(self, f"_{name}")

        def wrapper(backend: EKSBackend, *args: Any, **kwargs: Any) -> Any:
            return handler(backend, original, *args, **kwargs)

        return wrapper

    def _background(self, work: Callable[[], None]) -> None:
        def run() -> None:
            with self._lock:
                work()

        thread = threading.Thread(target=run, daemon=True)
        self._threads.append(thread)
        thread.start()

    # -- clusters -------------------------------------------------------------------------

    def _create_cluster(self, backend: EKSBackend, original: Callable[..., Cluster], **kwargs: Any) -> Cluster:
        cluster = original(backend, **kwargs)
        self.writes.append(f"create_cluster {cluster.name}")
        if kwargs.get("version") is None:
            cluster.version = ".".join(KUBERNETES_VERSION.lstrip("v").split(".")[:2])
        # no endpoint while CREATING, as EKS answers (moto types it str)
        cluster.status, cluster.endpoint, cluster.certificate_authority = "CREATING", None, {}  # type: ignore[assignment]
        self._background(lambda: self._bring_up(cluster))
        return cluster

    def _bring_up(self, cluster: Cluster) -> None:
        try:
            config = self.webhook.kubeconfig(cluster.name, self.workdir)
            self.clusters.add(cluster.name)
            SimProvider(apiserver_args={"authentication-token-webhook-config-file": str(config),
                                        "authentication-token-webhook-version": "v1"}).ensure_cluster(cluster.name)
            kwok = KwokCluster(cluster.name)
            install_karpenter_crds(api_client(kwok.kubeconfig_path))
            entry = yaml.safe_load(kwok.kubeconfig_path.read_text())["clusters"][0]["cluster"]
            cluster.certificate_authority = {"data": base64.b64encode(Path(entry["certificate-authority"])
                                                                      .read_bytes()).decode()}
            cluster.endpoint = entry["server"]
            cluster.status = "ACTIVE"
        except Exception as exc:  # noqa: BLE001 - reported the way EKS reports it
            _failed(cluster, "FAILED", exc)

    def _delete_cluster(self, backend: EKSBackend, original: Callable[..., Cluster], name: str) -> Cluster:
        cluster = backend.clusters.get(name)
        if cluster is None or cluster.nodegroups:
            return original(backend, name)  # moto's own errors: not found, node groups attached
        self.writes.append(f"delete_cluster {name}")
        cluster.status = "DELETING"

        def tear_down() -> None:
            try:
                KwokCluster(name).delete()
                self.clusters.discard(name)
                original(backend, name)
            except Exception as exc:  # noqa: BLE001
                _failed(cluster, "FAILED", exc)

        self._background(tear_down)
        return cluster

    # -- node groups ----------------------------------------------------------------------

    def _create_nodegroup(self, backend: EKSBackend, original: Callable[..., Nodegroup], **kwargs: Any) -> Nodegroup:
        group = original(backend, **kwargs)
        self.writes.append(f"create_nodegroup {group.nodegroup_name}")
        group.status = "CREATING"
        if group.nodegroup_name in self.failures:
            code, message = self.failures.pop(group.nodegroup_name)
            group.status, group.health = "CREATE_FAILED", {"issues": [{"code": code, "message": message}]}
        else:
            self._background(lambda: self._converge(group, "CREATE_FAILED"))
        return group

    def _update_nodegroup_config(self, backend: EKSBackend, original: Callable[..., dict[str, Any]],
                                 **kwargs: Any) -> dict[str, Any]:
        update = original(backend, **kwargs)
        group = backend.clusters[kwargs["cluster_name"]].nodegroups[kwargs["nodegroup_name"]]
        self.writes.append(f"update_nodegroup_config {group.nodegroup_name}")
        group.status = "UPDATING"
        self._background(lambda: self._converge(group, "DEGRADED"))
        return update

    def _converge(self, group: Nodegroup, failed_status: str) -> None:
        """kwok nodes for the group's desired size, carrying what EKS puts on its nodes."""
        try:
            known = catalog_instance(group.instance_types[0])
            if known is not None:  # a non-GPU instance type gets no nodes: the sim only plays GPU nodes
                spec = NodeGroupSpec(group.nodegroup_name, known[0], group.scaling_config["desiredSize"],
                                     known[1].gpus)
                SimProvider().ensure_node_group(group.cluster_name, spec)
            self._label_nodes(group)
            group.status = "ACTIVE"
        except Exception as exc:  # noqa: BLE001
            _failed(group, failed_status, exc)

    def _label_nodes(self, group: Nodegroup) -> None:
        v1 = CoreV1Api(api_client(KwokCluster(group.cluster_name).kubeconfig_path))
        labels: dict[str, str | None] = {
            EKS_NODEGROUP_LABEL: group.nodegroup_name, "node.kubernetes.io/instance-type": group.instance_types[0],
            "eks.amazonaws.com/capacityType": group.capacity_type, **group.labels}
        taints = tuple(Taint(t["key"], t.get("value") or "", K8S_EFFECTS[t["effect"]]) for t in group.taints)
        for node in v1.list_node(label_selector=f"{L.NODEGROUP}={group.nodegroup_name}").items:
            patch = node_patch(v1.api_client.sanitize_for_serialization(node), labels, taints)
            if patch:
                v1.patch_node(node.metadata.name, patch, _content_type=MERGE_PATCH)

    def _delete_nodegroup(self, backend: EKSBackend, original: Callable[..., Nodegroup], cluster_name: str,
                          nodegroup_name: str) -> Nodegroup:
        cluster = backend.clusters.get(cluster_name)
        group = cluster.nodegroups.get(nodegroup_name) if cluster else None
        if group is None:
            return original(backend, cluster_name, nodegroup_name)  # moto's not-found errors
        self.writes.append(f"delete_nodegroup {nodegroup_name}")
        group.status = "DELETING"

        def drain() -> None:
            try:
                v1 = CoreV1Api(api_client(KwokCluster(cluster_name).kubeconfig_path))
                v1.delete_collection_node(label_selector=f"{L.NODEGROUP}={nodegroup_name}")
                original(backend, cluster_name, nodegroup_name)
            except Exception as exc:  # noqa: BLE001
                _failed(group, "DELETE_FAILED", exc)

        self._background(drain)
        return group
