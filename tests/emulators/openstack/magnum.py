"""Magnum v1 semantics: clusters, node groups and certificates, with statuses that progress in
worker threads while the sim data plane catches up (202 first, *_COMPLETE or *_FAILED later)."""

from __future__ import annotations

import datetime
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.emulators.openstack.dataplane import FLAVORS, Flavor, SimDataPlane
from tests.support.tools import KUBERNETES_VERSION

MIN_PROGRESS_S = 1.0  # every transition is observable as *_IN_PROGRESS for at least this long
NODEGROUP_MIN_VERSION = (1, 9)
COE_VERSION = KUBERNETES_VERSION  # the data plane is a sim cluster
TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
          406: "Not Acceptable", 409: "Conflict", 429: "Too Many Requests"}


class MagnumError(Exception):
    """Rendered as Magnum's {"errors": [{"status", "title", "detail"}]}."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail

    def body(self) -> dict[str, Any]:
        return {"errors": [{"request_id": "", "code": "client", "status": self.status,
                            "title": TITLES.get(self.status, "Error"), "detail": self.detail, "links": []}]}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")


@dataclass
class Template:
    uuid: str
    name: str
    labels: dict[str, str]
    flavor_id: str = "m1.large"
    master_flavor_id: str = "m1.large"


@dataclass
class NodeGroup:
    uuid: str
    name: str
    flavor: Flavor
    node_count: int
    role: str
    labels: dict[str, str]
    is_default: bool = False
    min_node_count: int = 0
    max_node_count: int | None = None
    merge_labels: bool = False
    status: str = "CREATE_IN_PROGRESS"
    status_reason: str | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str | None = None
    visible_at: float = 0.0  # the conductor writes the record after the API's 202 (see record_delay)

    def summary(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "name": self.name, "flavor_id": self.flavor.name, "image_id": "fedora-coreos-38",
                "node_count": self.node_count, "role": self.role, "is_default": self.is_default,
                "status": self.status, "max_node_count": self.max_node_count, "min_node_count": self.min_node_count}

    def detail(self, cluster: Cluster) -> dict[str, Any]:
        return {**self.summary(), "cluster_id": cluster.uuid, "project_id": cluster.project_id,
                "docker_volume_size": None, "labels": dict(self.labels), "labels_overridden": {},
                "labels_added": {}, "labels_skipped": {}, "node_addresses": [], "stack_id": cluster.stack_id,
                "status_reason": self.status_reason, "version": None, "merge_labels": self.merge_labels,
                "created_at": self.created_at, "updated_at": self.updated_at}


@dataclass
class Cluster:
    uuid: str
    name: str
    template: Template
    labels: dict[str, str]
    labels_added: dict[str, str]
    merge_labels: bool
    keypair: str | None
    create_timeout: int
    simulated: bool  # False: a record only (no sim cluster behind it), for adoption tests
    project_id: str
    status: str = "CREATE_IN_PROGRESS"
    status_reason: str | None = None
    api_address: str | None = None
    stack_id: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    nodegroups: dict[str, NodeGroup] = field(default_factory=dict)  # by uuid
    created_at: str = field(default_factory=_now)
    updated_at: str | None = None
    visible_at: float = 0.0  # the conductor writes the record after the API's 202 (see record_delay)

    @property
    def node_count(self) -> int:
        return sum(ng.node_count for ng in self.nodegroups.values() if ng.role != "master")

    @property
    def master_count(self) -> int:
        return sum(ng.node_count for ng in self.nodegroups.values() if ng.role == "master")

    def summary(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "name": self.name, "cluster_template_id": self.template.uuid,
                "keypair": self.keypair, "node_count": self.node_count, "master_count": self.master_count,
                "create_timeout": self.create_timeout, "stack_id": self.stack_id, "status": self.status,
                "health_status": None}

    def detail(self) -> dict[str, Any]:
        ready = self.status.endswith("_COMPLETE")
        return {**self.summary(), "labels": dict(self.labels), "labels_added": dict(self.labels_added),
                "labels_overridden": {}, "labels_skipped": {}, "merge_labels": self.merge_labels,
                "status_reason": self.status_reason, "health_status_reason": {}, "discovery_url": None,
                "api_address": self.api_address, "coe_version": COE_VERSION if ready else None,
                "container_version": "1.7.20" if ready else None, "master_addresses": [], "node_addresses": [],
                "flavor_id": self.template.flavor_id, "master_flavor_id": self.template.master_flavor_id,
                "docker_volume_size": None, "fixed_network": None, "fixed_subnet": None,
                "floating_ip_enabled": True, "master_lb_enabled": False, "project_id": self.project_id,
                "user_id": "u-demo", "created_at": self.created_at, "updated_at": self.updated_at}


def _int(body: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise MagnumError(400, f"Invalid input for field/attribute {key}. Value: {value!r}.")
    return value


class Magnum:
    """The API's behaviour; the HTTP layer (server.py) parses requests and renders the results."""

    def __init__(self, project_id: str, data_plane: SimDataPlane | None = None) -> None:
        self.project_id = project_id
        self.data = data_plane or SimDataPlane()
        self.lock = threading.RLock()
        self.templates = {t.uuid: t for t in [Template(str(uuidlib.uuid4()), "gpu-template",
                                                       {"kube_tag": COE_VERSION, "container_runtime": "containerd"})]}
        self.clusters: dict[str, Cluster] = {}
        self.failures: list[str] = []  # status_reason of the next creates that will fail
        # Seconds between a create's 202 and its record, as when Magnum's conductor is slow to pick up
        # the RPC cast (a fault the real services on this machine do not show).
        self.record_delay = 0.0
        self.workers: list[threading.Thread] = []

    # -- lookups (name or uuid, as Magnum's api_utils.get_resource) --------------------------

    def visible(self, items: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        return {key: item for key, item in items.items() if getattr(item, "visible_at", 0.0) <= now}

    def _find(self, kind: str, items: dict[str, Any], ident: str) -> Any:
        items = self.visible(items)
        if ident in items:
            return items[ident]
        named = [item for item in items.values() if item.name == ident]
        if len(named) > 1:
            raise MagnumError(409, f"Multiple {kind.lower()}s exist with same name '{ident}'. Please use the "
                                   f"{kind.lower()} uuid instead.")
        if not named:
            raise MagnumError(404, f"{kind} {ident} could not be found.")
        return named[0]

    def cluster(self, ident: str) -> Cluster:
        return self._find("Cluster", self.clusters, ident)

    def nodegroup(self, cluster: Cluster, ident: str) -> NodeGroup:
        return self._find("Nodegroup", cluster.nodegroups, ident)

    # -- transitions -----------------------------------------------------------------------

    def _transition(self, objs: list[Cluster | NodeGroup], action: str, work: Callable[[], None],
                    done: Callable[[], object] | None = None, failure: str | None = None) -> None:
        """Set *_IN_PROGRESS now; run `work` in a thread; then *_COMPLETE (or `done`) or *_FAILED."""
        for obj in objs:
            obj.status, obj.status_reason, obj.updated_at = f"{action}_IN_PROGRESS", None, _now()

        def run() -> None:
            started = time.monotonic()
            try:
                if failure:
                    raise RuntimeError(failure)
                work()
                outcome, reason = f"{action}_COMPLETE", f"Stack {action} completed successfully"
            except Exception as exc:  # noqa: BLE001 - a failed stack carries its reason
                outcome, reason = f"{action}_FAILED", str(exc)
            time.sleep(max(0.0, MIN_PROGRESS_S - (time.monotonic() - started)))
            with self.lock:
                if outcome.endswith("_COMPLETE") and done is not None:
                    done()
                for obj in objs:
                    obj.status, obj.status_reason, obj.updated_at = outcome, reason, _now()

        thread = threading.Thread(target=run, name=f"magnum-{action.lower()}", daemon=True)
        self.workers.append(thread)
        thread.start()

    def _next_failure(self) -> str | None:
        return self.failures.pop(0) if self.failures else None

    def wait_idle(self, timeout: float = 300.0) -> None:
        """Block until every transition started so far has finished."""
        for thread in list(self.workers):
            thread.join(timeout)

    # -- clusters --------------------------------------------------------------------------

    def create_cluster(self, body: dict[str, Any], simulated: bool = True) -> Cluster:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise MagnumError(400, "Invalid input for field/attribute name.")
        if not body.get("cluster_template_id"):
            raise MagnumError(400, "Mandatory field missing: cluster_template_id")
        template = self._find("ClusterTemplate", self.templates, body["cluster_template_id"])
        if any(c.name == name for c in self.clusters.values()):
            # Magnum allows duplicate names; the emulator's sim cluster is named after it, so it does not.
            raise MagnumError(409, f"A cluster with name {name} already exists.")
        node_count = _int(body, "node_count", 1)
        master_count = _int(body, "master_count", 1, minimum=1)
        given = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        merge = bool(body.get("merge_labels", False))
        labels = {**template.labels, **given} if merge else (given or dict(template.labels))
        cluster = Cluster(str(uuidlib.uuid4()), name, template, labels, given if merge else {}, merge,
                          body.get("keypair"), _int(body, "create_timeout", 60) or 60, simulated, self.project_id)
        for ng_name, role, count in (("default-master", "master", master_count), ("default-worker", "worker",
                                                                                  node_count)):
            ng = NodeGroup(str(uuidlib.uuid4()), ng_name, FLAVORS[template.flavor_id], count or 0, role, labels,
                           is_default=True)
            cluster.nodegroups[ng.uuid] = ng
        cluster.visible_at = time.monotonic() + self.record_delay
        self.clusters[cluster.uuid] = cluster

        def work() -> None:
            # a record-only cluster gets a documentation address (RFC 5737) nothing answers on
            cluster.api_address = self.data.create_cluster(name) if simulated else "https://192.0.2.10:6443"

        self._transition([cluster, *cluster.nodegroups.values()], "CREATE", work, failure=self._next_failure())
        return cluster

    def delete_cluster(self, ident: str) -> None:
        cluster = self.cluster(ident)
        self._busy(cluster)

        def work() -> None:
            if cluster.simulated:
                self.data.delete_cluster(cluster.name)

        self._transition([cluster, *cluster.nodegroups.values()], "DELETE", work,
                         done=lambda: self.clusters.pop(cluster.uuid, None))

    def _busy(self, obj: Cluster | NodeGroup) -> None:
        if obj.status.endswith("_IN_PROGRESS"):
            raise MagnumError(409, f"{obj.name} is in status {obj.status}; try again when it is done.")

    def resize(self, ident: str, body: dict[str, Any]) -> Cluster:
        cluster = self.cluster(ident)
        node_count = _int(body, "node_count", None)
        if node_count is None:
            raise MagnumError(400, "Mandatory field missing: node_count")
        ng = self.nodegroup(cluster, body.get("nodegroup") or "default-worker")
        if ng.role == "master":
            raise MagnumError(400, "Resizing a nodegroup with role master is not supported.")
        if node_count < ng.min_node_count or (ng.max_node_count is not None and node_count > ng.max_node_count):
            raise MagnumError(400, f"Resizing {ng.name} outside the allowed range: min_node_count = "
                                   f"{ng.min_node_count}, max_node_count = {ng.max_node_count}")
        self._busy(cluster)
        self._busy(ng)
        ng.node_count = node_count
        self._transition([cluster, ng], "UPDATE", lambda: self._nodes(cluster, ng))
        return cluster

    def _nodes(self, cluster: Cluster, ng: NodeGroup) -> None:
        if cluster.simulated and not ng.is_default:
            self.data.ensure_nodes(cluster.name, ng.name, ng.flavor, ng.node_count)

    # -- node groups -----------------------------------------------------------------------

    def create_nodegroup(self, ident: str, body: dict[str, Any]) -> NodeGroup:
        cluster = self.cluster(ident)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise MagnumError(400, "Invalid input for field/attribute name.")
        if any(ng.name == name for ng in cluster.nodegroups.values()):
            raise MagnumError(409, f"A node group with name {name} already exists in the cluster {cluster.name}.")
        if not cluster.api_address:  # the only state Magnum checks (nodegroup.py post)
            raise MagnumError(409, "Cluster API address is not available yet")  # ClusterAPIAddressUnavailable
        role = body.get("role", "worker")
        if role == "master":
            raise MagnumError(400, "Creating master nodegroups is currently not supported.")
        flavor_id = body.get("flavor_id") or cluster.template.flavor_id
        if flavor_id not in FLAVORS:
            raise MagnumError(400, f"Unable to find flavor {flavor_id}.")  # exception.FlavorNotFound: 400
        count = _int(body, "node_count", 1)
        low = _int(body, "min_node_count", 0)
        high = _int(body, "max_node_count", None)
        assert count is not None and low is not None
        if count < low or (high and count > high):  # NodeGroupInvalidInput is a Conflict; 0 is no maximum
            raise MagnumError(409, f"max_node_count for {name} is invalid (node_count ({count}) should be between "
                                   f"min_node_count ({low}) and max_node_count ({high})).")
        given = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        merge = bool(body.get("merge_labels", False))
        ng = NodeGroup(str(uuidlib.uuid4()), name, FLAVORS[flavor_id], count, role,
                       {**cluster.labels, **given} if merge else (given or dict(cluster.labels)),
                       min_node_count=low, max_node_count=high, merge_labels=merge)
        ng.visible_at = time.monotonic() + self.record_delay
        cluster.nodegroups[ng.uuid] = ng
        self._transition([ng], "CREATE", lambda: self._nodes(cluster, ng), failure=self._next_failure())
        return ng

    def update_nodegroup(self, ident: str, ng_ident: str, patch: Any) -> NodeGroup:
        """JSON patch; like Magnum, only min_node_count and max_node_count may change."""
        cluster = self.cluster(ident)
        ng = self.nodegroup(cluster, ng_ident)
        if not isinstance(patch, list):
            raise MagnumError(400, "A JSON patch (a list of operations) is expected.")
        values = {"min_node_count": ng.min_node_count, "max_node_count": ng.max_node_count}
        for op in patch:
            key = str(op.get("path", "")).lstrip("/")
            if op.get("op") != "remove" and op.get("value") is None:  # types.JsonPatchType.validate
                raise MagnumError(400, "'add' and 'replace' operations needs value")
            if key not in values or op.get("op") not in ("replace", "remove"):
                raise MagnumError(400, f"Cannot {op.get('op')} {op.get('path')}: only min_node_count and "
                                       "max_node_count can be updated.")
            values[key] = op.get("value") if op["op"] == "replace" else (0 if key == "min_node_count" else None)
        low, high = values["min_node_count"], values["max_node_count"]
        if not isinstance(low, int) or low > ng.node_count:  # nodegroup._validate_node_count: 409
            raise MagnumError(409, f"min_node_count for {ng.name} is invalid (min_node_count ({low}) should be less "
                                   f"or equal to node_count ({ng.node_count})).")
        if high and (not isinstance(high, int) or high < ng.node_count):
            raise MagnumError(409, f"max_node_count for {ng.name} is invalid (node_count ({ng.node_count}) should be "
                                   f"less or equal to max_node_count ({high})).")
        self._busy(ng)
        ng.min_node_count, ng.max_node_count = low, high
        self._transition([ng], "UPDATE", lambda: None)
        return ng

    def delete_nodegroup(self, ident: str, ng_ident: str) -> None:
        cluster = self.cluster(ident)
        ng = self.nodegroup(cluster, ng_ident)
        if ng.is_default:
            raise MagnumError(400, "Deleting a default nodegroup is not supported.")
        self._busy(ng)

        def work() -> None:
            if cluster.simulated:
                self.data.ensure_nodes(cluster.name, ng.name, ng.flavor, 0)

        self._transition([ng], "DELETE", work, done=lambda: cluster.nodegroups.pop(ng.uuid, None))

    # -- certificates ----------------------------------------------------------------------

    def _ready_cluster(self, ident: str) -> Cluster:
        cluster = self.cluster(ident)
        if not cluster.simulated or cluster.api_address is None:
            raise MagnumError(400, f"Cluster {cluster.name} has no CA yet (status {cluster.status}).")
        return cluster

    def ca(self, ident: str) -> dict[str, Any]:
        cluster = self._ready_cluster(ident)
        return {"cluster_uuid": cluster.uuid, "pem": self.data.ca_pem(cluster.name)}

    def sign(self, body: dict[str, Any]) -> dict[str, Any]:
        csr = body.get("csr")
        if not body.get("cluster_uuid") or not isinstance(csr, str):
            raise MagnumError(400, "Mandatory fields missing: cluster_uuid, csr")
        cluster = self._ready_cluster(body["cluster_uuid"])
        try:
            pem = self.data.sign(cluster.name, csr)
        except ValueError as exc:
            raise MagnumError(400, f"Invalid CSR: {exc}") from None
        return {"cluster_uuid": cluster.uuid, "csr": csr, "pem": pem}
