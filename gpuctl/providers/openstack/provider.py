"""MagnumProvider: Kubernetes clusters and GPU node groups on OpenStack Magnum.

Magnum's records are the source of truth (status, node_count, flavor, labels); the Kubernetes API
is used only to wait until a node group's nodes have joined and are Ready, because the flow labels
and taints them right after this provider returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.site import openstack_flavor
from gpuctl.model.spec import NodeGroupSpec, PlatformSpec
from gpuctl.providers.base import ClusterInfo, NodeGroupInfo, scaled_bounds
from gpuctl.providers.openstack import CAPABILITIES, certificates
from gpuctl.providers.openstack.magnum import USABLE, MagnumApi, connect
from gpuctl.providers.openstack.nodegroups import (
    NODE_LABEL,
    auto_healing,
    bounds_of,
    cluster_body,
    gpu_for_flavor,
    is_default,
    is_managed,
    node_attr_changes,
    nodegroup_body,
    nodegroup_info,
    wanted_bounds,
    widened,
)
from gpuctl.providers.openstack.pending import PendingCreates
from gpuctl.providers.openstack.waits import wait_for_status, wait_until_visible
from gpuctl.util.errors import CloudError, NotFound, UsageError, WaitTimeout
from gpuctl.util.output import info

CLUSTER_TIMEOUT_S = 3600.0  # Magnum's default create_timeout is 60 minutes
NODEGROUP_TIMEOUT_S = 1800.0
NODES_READY_TIMEOUT_S = 900.0
Json = dict[str, Any]


class MagnumProvider:
    cloud = "openstack"
    capabilities = CAPABILITIES

    def __init__(self, options: CloudOptions | None = None) -> None:
        self.options = options or CloudOptions()
        self._magnum: MagnumApi | None = None
        self._pending: PendingCreates | None = None
        self._kubeconfigs: dict[str, dict[str, Any]] = {}

    @property
    def api(self) -> MagnumApi:
        if self._magnum is None:
            self._magnum = MagnumApi(connect(self.options.os_cloud, self.options.region))
        return self._magnum

    @property
    def pending(self) -> PendingCreates:
        """Creates Magnum accepted, per endpoint and project (names are unique only per project)."""
        if self._pending is None:
            self._pending = PendingCreates(self.api.scope())
        return self._pending

    def check_node_group(self, spec: NodeGroupSpec) -> None:
        """Every catalog GPU has a flavor (site config or catalog); Magnum checks the flavor exists."""

    def check_credentials(self) -> None:
        self.api.authenticate()

    def cluster_steps(self, spec: PlatformSpec, client: Kube) -> list[Step]:
        """check-auto-healing (unless --no-node-repair): says whether the cluster's labels turn Magnum's
        auto-healing on, and which (plan), or that they leave it off (apply); a check, as Magnum takes a cluster's
        labels only at create."""
        if self.options.no_node_repair:
            return []

        def observe() -> Observed:
            return Observed(Change.CHECK, auto_healing(self._cluster(spec.name).get("labels") or {})[1])

        def report() -> Change:  # a check: it changes nothing, and says where auto-healing is off
            on, how = auto_healing(self._cluster(spec.name).get("labels") or {})
            if not on:
                info(f"Magnum cluster {spec.name!r}: {how}")
            return Change.NO_CHANGE

        return [Step("check-auto-healing", observe, report, check=True)]

    def context_name(self, cluster: str) -> str:
        return f"gpuctl-openstack-{cluster}"

    def node_selector(self, nodegroup: str) -> str:
        return f"{NODE_LABEL}={nodegroup}"

    def _flags(self) -> str:
        """The cloud-choosing flags to repeat in a suggested command."""
        flags = " --cloud openstack"
        if self.options.os_cloud:
            flags += f" --os-cloud {self.options.os_cloud}"
        if self.options.region:
            flags += f" --region {self.options.region}"
        return flags

    def _cluster_cleanup(self, name: str) -> str:
        return f"clean up with 'gpuctl cluster delete{self._flags()} --name {name} --yes'"

    def _nodegroup_cleanup(self, cluster: str, name: str) -> str:
        return f"clean up with 'gpuctl nodegroup delete{self._flags()} --cluster {cluster} --name {name} --yes'"

    # -- clusters --------------------------------------------------------------------------

    def _cluster(self, name: str) -> Json:
        cluster = self.api.get_cluster(name)
        if cluster is None:
            raise NotFound(f"OpenStack cluster {name!r} not found", f"see 'gpuctl cluster list{self._flags()}'")
        return cluster

    def _settled_cluster(self, name: str) -> Json:
        """The cluster, once an operation in progress on it has finished: Magnum refuses node groups on a
        cluster without an API address yet (409) and resizes while it is busy (400)."""
        cluster = self._cluster(name)
        if cluster["status"] == "DELETE_IN_PROGRESS":
            raise CloudError(f"OpenStack cluster {name!r} is being deleted", "create it again once it is gone")
        if cluster["status"].endswith("_IN_PROGRESS"):
            info(f"Magnum cluster {name!r} is {cluster['status']}: waiting for it to finish")
            cluster = self._wait_cluster(cluster["uuid"], name, USABLE) or cluster
        return cluster

    def ensure_cluster(self, name: str) -> Change:
        cluster = self.api.get_cluster(name) or self._accepted(
            "cluster", name, lambda uuid: self.api.get_cluster(uuid, in_flux=True))
        if cluster is not None:  # adopt it, once any operation in progress has finished
            if cluster["status"] not in USABLE:
                self._wait_cluster(cluster["uuid"], name, USABLE)
            return Change.NO_CHANGE
        if not self.options.template:
            raise UsageError("--template", f"OpenStack cluster {name!r} does not exist; creating it needs a Magnum "
                             "cluster template", "pass --template NAME (see 'openstack coe cluster template list'), "
                             "or --name of an existing cluster to adopt it")
        body = cluster_body(name, self.options.template, self.options)
        healing = auto_healing(body["labels"])[1] if not self.options.no_node_repair else "auto-healing off"
        info(f"creating Magnum cluster {name!r} from template {self.options.template!r} ({healing})")
        uuid = self.api.create_cluster(body)
        self.pending.put("cluster", name, uuid)
        self._wait_cluster(uuid, name, ("CREATE_COMPLETE",), created=True)
        return Change.CREATED

    def _accepted(self, kind: str, name: str, read: Callable[[str], Json | None]) -> Json | None:
        """The record of a create of `name` that Magnum accepted for an earlier run and has not yet written
        (see pending.py): waited for, so that this run does not create a second one."""
        pending = self.pending.get(kind, name)
        if pending is None:
            self.pending.drop(kind, name)
            return None
        uuid, left = pending
        info(f"an earlier run asked Magnum to create {kind} {name!r} ({uuid}); waiting up to {left:.0f}s for it")
        try:
            return wait_until_visible(lambda: read(uuid), f"{kind} {name!r}", left)
        finally:
            self.pending.drop(kind, name)

    def _wait_cluster(self, uuid: str, name: str, goal: tuple[str, ...] | None, before: Json | None = None,
                      created: bool = False) -> Json | None:
        try:
            # created: a 400 is a record not visible yet; deleted (goal None): one whose node groups Magnum destroyed
            return wait_for_status(lambda: self.api.get_cluster(uuid, in_flux=created or goal is None),
                                   f"Magnum cluster {name!r}", goal,
                                   CLUSTER_TIMEOUT_S, self._cluster_cleanup(name), before, created)
        finally:
            if created:
                self.pending.drop("cluster", name)

    def get_cluster(self, name: str) -> ClusterInfo | None:
        cluster = self.api.get_cluster(name)
        if cluster is None:
            return None
        return ClusterInfo(cluster["name"], self.cloud, cluster["status"], cluster.get("api_address"),
                           cluster.get("coe_version") or "")

    def list_clusters(self) -> list[ClusterInfo]:
        return [info for c in self.api.list_clusters() if (info := self.get_cluster(c["uuid"])) is not None]

    def delete_cluster(self, name: str) -> Change:
        """Delete the cluster if gpuctl created it; of an adopted one, only the node groups gpuctl added."""
        cluster = self._cluster(name)
        if is_managed(cluster):
            already = cluster["status"] == "DELETE_IN_PROGRESS"
            if not already:
                self.api.delete_cluster(cluster["uuid"], name)
            self._wait_cluster(cluster["uuid"], name, None, before=None if already else cluster)
            certificates.CertificateCache(cluster["uuid"]).forget()
            return Change.DELETED
        ours = [ng for ng in self._node_groups(cluster["uuid"]) if is_managed(ng)]
        info(f"cluster {name!r} was not created by gpuctl: it stays; deleting only the node groups gpuctl added: "
             f"{', '.join(ng['name'] for ng in ours) or 'none'}")
        for ng in ours:
            self._delete_node_group(cluster, ng)
        return Change.DELETED if ours else Change.NO_CHANGE

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        """Like `openstack coe cluster config`: the cluster CA and a client certificate Magnum signs."""
        if cluster not in self._kubeconfigs:
            record = self._cluster(cluster)
            if not record.get("api_address"):
                raise NotFound(f"OpenStack cluster {cluster!r} has no API address (status {record['status']})",
                               "wait until it is CREATE_COMPLETE")
            uuid = record["uuid"]
            ca_pem = self.api.ca_pem(uuid)
            creds = certificates.client_credentials(certificates.CertificateCache(uuid), ca_pem,
                                                    lambda csr: self.api.sign(uuid, csr))
            self._kubeconfigs[cluster] = certificates.render_kubeconfig(
                self.context_name(cluster), record["api_address"], ca_pem, creds)
        return self._kubeconfigs[cluster]

    # -- node groups -----------------------------------------------------------------------

    def _node_groups(self, uuid: str) -> list[Json]:
        """Every non-default node group, in detail (the list omits labels)."""
        names = [ng["name"] for ng in self.api.list_nodegroups(uuid) if not is_default(ng)]
        return [ng for name in sorted(names) if (ng := self.api.get_nodegroup(uuid, name)) is not None]

    def _node_group(self, cluster: Json, name: str) -> Json:
        ng = self.api.get_nodegroup(cluster["uuid"], name)
        if ng is None:
            raise NotFound(f"node group {name!r} not found in OpenStack cluster {cluster['name']!r}",
                           f"see 'gpuctl nodegroup list{self._flags()} --cluster {cluster['name']}'")
        return ng

    def _wait_node_group(self, cluster: Json, name: str, goal: tuple[str, ...] | None, before: Json | None = None,
                         created: bool = False) -> Json | None:
        try:
            return wait_for_status(lambda: self.api.get_nodegroup(cluster["uuid"], name), f"node group {name!r}",
                                   goal, NODEGROUP_TIMEOUT_S, self._nodegroup_cleanup(cluster["name"], name),
                                   before, created)
        finally:
            if created:
                self.pending.drop(f"nodegroup {cluster['uuid']}", name)

    def _settled(self, cluster: Json, ng: Json) -> Json:
        """The node group once no operation runs on it; a failed create can only be deleted."""
        if ng["status"] in USABLE:
            return ng
        settled = self._wait_node_group(cluster, ng["name"], USABLE)
        assert settled is not None  # wait_for_status returns the record for a non-None goal
        return settled

    def ensure_node_group(self, cluster: str, spec: NodeGroupSpec) -> Change:
        record = self._settled_cluster(cluster)
        flavor = spec.flavor or openstack_flavor(spec.gpu)
        bounds = wanted_bounds(spec)
        kind = f"nodegroup {record['uuid']}"
        ng = self.api.get_nodegroup(record["uuid"], spec.name) or self._accepted(
            kind, spec.name, lambda uuid: self.api.get_nodegroup(record["uuid"], uuid))
        if ng is None:
            body = nodegroup_body(spec, flavor, *bounds, with_node_attrs=self.api.takes_node_attrs)
            made = self.api.create_nodegroup(record["uuid"], body)
            self.pending.put(kind, spec.name, made["uuid"])
            self._wait_node_group(record, spec.name, ("CREATE_COMPLETE",), created=True)
            self._wait_for_nodes(cluster, spec.name, spec.nodes)
            return Change.CREATED
        if is_default(ng):
            raise UsageError("node group name", f"{spec.name!r} is a default node group of Magnum",
                             "choose another name for the GPU node group")
        ng = self._settled(record, ng)
        if ng["flavor_id"] != flavor:
            model = gpu_for_flavor(ng["flavor_id"])
            raise UsageError("--flavor" if spec.flavor else "--gpu",
                             f"node group {spec.name!r} has flavor {ng['flavor_id']}"
                             f"{f' ({model.name})' if model else ''}, not {flavor}",
                             "a node group's flavor cannot change: add a node group with another name")
        per_node = nodegroup_info(cluster, ng).gpus_per_node
        if per_node != spec.gpus_per_node:
            raise UsageError("--gpus-per-node", f"node group {spec.name!r} has {per_node} GPUs per node, not "
                             f"{spec.gpus_per_node}", "add a node group with another name")
        attrs = node_attr_changes(ng, spec) if self.api.takes_node_attrs else {}
        if attrs:
            info(f"setting the node labels and taints of node group {spec.name!r} in Magnum")
            ng = self._update(record, ng, attrs)
        change = self._converge_size(record, ng, spec.nodes, bounds)
        self._wait_for_nodes(cluster, spec.name, spec.nodes)
        return Change.UPDATED if attrs else change

    def scale_node_group(self, cluster: str, name: str, nodes: int, min_nodes: int | None = None,
                         max_nodes: int | None = None) -> Change:
        """To `nodes`, 0 included: gpuctl speaks microversion 1.10 or later, where Magnum resizes a node group
        to 0 (magnum/api/controllers/v1/cluster_actions.py, resize), its min_node_count lowered to allow it."""
        record = self._settled_cluster(cluster)
        ng = self._node_group(record, name)
        if ng["role"] == "master":
            raise UsageError("--name", f"{name!r} holds the control plane", "scale a worker node group")
        ng = self._settled(record, ng)
        # The bounds given, else the current ones widened just enough to hold the new count.
        change = self._converge_size(record, ng, nodes, scaled_bounds(bounds_of(ng), nodes, min_nodes, max_nodes))
        self._wait_for_nodes(cluster, name, nodes)
        return change

    def _converge_size(self, cluster: Json, ng: Json, nodes: int, bounds: tuple[int, int | None]) -> Change:
        """Resize to `nodes` and set min/max to `bounds`, writing only what differs."""
        current = bounds_of(ng)
        if current == bounds and ng["node_count"] == nodes:
            return Change.NO_CHANGE
        wide = widened(current, bounds)
        ng = self._set_bounds(cluster, ng, wide)
        if ng["node_count"] != nodes:
            info(f"resizing node group {ng['name']!r}: {ng['node_count']} -> {nodes} nodes")
            self.api.resize(cluster["uuid"], ng["name"], nodes)
            ng = self._updated(cluster, ng)
        self._set_bounds(cluster, ng, bounds)
        return Change.UPDATED

    def _set_bounds(self, cluster: Json, ng: Json, target: tuple[int, int | None]) -> Json:
        """PATCH only the bounds that differ; a maximum cleared is removed, not set to null."""
        current = bounds_of(ng)
        changes = {key: want for key, have, want in zip(("min_node_count", "max_node_count"), current, target,
                                                          strict=True)
                   if have != want}
        if not changes:
            return ng
        info(f"setting the autoscaler bounds of node group {ng['name']!r}: min {target[0]}, "
             f"max {target[1] if target[1] is not None else 'none'}")
        return self._update(cluster, ng, changes)

    def _update(self, cluster: Json, ng: Json, changes: Json) -> Json:
        self.api.update_nodegroup(cluster["uuid"], ng["name"], changes)
        return self._updated(cluster, ng)

    def _updated(self, cluster: Json, before: Json) -> Json:
        """The node group once the update Magnum just accepted has taken effect and finished."""
        updated = self._wait_node_group(cluster, before["name"], ("UPDATE_COMPLETE",), before=before)
        assert updated is not None  # wait_for_status returns the record for a non-None goal
        return updated

    def get_node_group(self, cluster: str, name: str) -> NodeGroupInfo | None:
        ng = self.api.get_nodegroup(self._cluster(cluster)["uuid"], name)
        return nodegroup_info(cluster, ng) if ng else None

    def list_node_groups(self, cluster: str) -> list[NodeGroupInfo]:
        return [nodegroup_info(cluster, ng) for ng in self._node_groups(self._cluster(cluster)["uuid"])]

    def delete_node_group(self, cluster: str, name: str) -> Change:
        record = self._cluster(cluster)
        ng = self._node_group(record, name)
        if is_default(ng):
            raise UsageError("--name", f"{name!r} is a default node group of Magnum and cannot be deleted",
                             f"delete the cluster instead: 'gpuctl cluster delete{self._flags()} --name {cluster}'")
        self._delete_node_group(record, ng)
        return Change.DELETED

    def _delete_node_group(self, cluster: Json, ng: Json) -> None:
        name = ng["name"]
        already = ng["status"] == "DELETE_IN_PROGRESS"
        if not already:
            self.api.delete_nodegroup(cluster["uuid"], name)
        self._wait_node_group(cluster, name, None, before=None if already else ng)

    def _wait_for_nodes(self, cluster: str, nodegroup: str, count: int) -> None:
        """Block until `count` nodes of the node group are Ready in Kubernetes: a stack can be
        complete before its kubelets have registered, and the flow configures nodes next."""
        if count == 0:
            return
        kube = Kube.connect(config_dict=self.kubeconfig(cluster))
        deadline = time.monotonic() + NODES_READY_TIMEOUT_S
        said = -1
        while True:
            nodes = kube.list("v1", "Node", labels=self.node_selector(nodegroup),
                              what=f"listing the nodes of node group {nodegroup!r}")
            ready = sum((n.condition("Ready") or {}).get("status") == "True" for n in nodes)
            if ready >= count:
                return
            if ready != said:
                info(f"waiting for node group {nodegroup!r}: {ready} of {count} nodes Ready")
                said = ready
            if time.monotonic() > deadline:
                raise WaitTimeout(f"node group {nodegroup!r}: {ready} of {count} nodes Ready after "
                                  f"{NODES_READY_TIMEOUT_S:.0f}s", "check the nodes' kubelet and the Magnum stack")
            time.sleep(2.0)
