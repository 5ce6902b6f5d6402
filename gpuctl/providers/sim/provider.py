"""SimProvider: clusters are kwokctl control planes, node groups are sets of kwok GPU nodes.

The cluster itself is the record: a node group is the nodes labelled gpuctl.dev/nodegroup=<name>,
so nothing can drift between a state file and what the API server holds.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from gpuctl.kube.errors import KubeTimeout, requesting
from gpuctl.kube.kube import Kube, wait_for_api
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.nodes import WORKERS
from gpuctl.model import labels as L
from gpuctl.model.catalog import get_gpu
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import NodeGroupSpec, PlatformSpec
from gpuctl.providers.base import ClusterInfo, NodeGroupInfo, scaled_bounds
from gpuctl.providers.sim import CAPABILITIES
from gpuctl.providers.sim.karpenter import karpenter_objects
from gpuctl.simulator import karpenter as sim_karpenter
from gpuctl.simulator import kwok as sim_kwok
from gpuctl.simulator.kueue import ensure_kueue as ensure_sim_kueue
from gpuctl.simulator.kueue import maps_profiles
from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.nodes import SYSTEM_NODE, node_name, render_node, render_system_node
from gpuctl.simulator.prometheus import ensure_monitoring
from gpuctl.simulator.supervisor import release_node_leases
from gpuctl.stack import karpenter as stack_karpenter
from gpuctl.tools.pins import KUBERNETES_VERSION
from gpuctl.util.errors import ClusterError, GpuctlError, NotFound, UsageError, WaitTimeout
from gpuctl.util.files import write_atomic
from gpuctl.util.output import info
from gpuctl.util.waiting import pause_after
from gpuctl.util.words import plural

log = logging.getLogger(__name__)

API_TIMEOUT_S = 120.0
IDENTITY_LABELS = (L.NODEGROUP, L.GPU_MODEL, L.GPUS_PER_NODE, L.MANAGED_BY)
NODES_READY_TIMEOUT_S = 120.0
# The simulated operator restarts a control-plane process within seconds (supervisor.py: checks each
# second, backs off a crash loop); one stopped longer than this will not come back by itself.
SUPERVISOR_GRACE_S = 10.0
KARPENTER_DRAIN_TIMEOUT_S = 120.0  # Karpenter's kwok provider terminates a NodeClaim in about 5 s


def _ready(node: KubeObject) -> bool:
    return (node.condition("Ready") or {}).get("status") == "True"


def _embed(section: dict[str, Any], key: str) -> None:
    """Replace a file reference (`key`) by its base64 `key-data`: the kubeconfig must stand alone."""
    if key in section:
        section[f"{key}-data"] = base64.b64encode(Path(section.pop(key)).read_bytes()).decode()


def _probe_api(kwok: KwokCluster) -> None:
    """One request to a running kube-apiserver: a frozen one ends the command here at the request
    deadline (exit 7, naming the server), not inside `kwokctl start`, which would wait for it without end."""
    try:
        Kube.connect(kwok.kubeconfig_path).request("GET", "/version")
    except KubeTimeout:
        raise
    except GpuctlError:  # it answered (or is gone, or its kubeconfig is): kwokctl start deals with the rest
        return


def _release_node_leases(kwok: KwokCluster) -> None:
    """The node Leases of a kwok controller that is not running, released before another starts: it would
    otherwise manage no node until they expire (200 s; supervisor.py release_node_leases)."""
    try:
        release_node_leases(Kube.connect(kwok.kubeconfig_path))
    except KubeTimeout:
        raise
    except GpuctlError as exc:  # etcd down, say: kwokctl start repairs it; they expire anyway
        log.debug("releasing the node leases of sim cluster %s: %s", kwok.name, exc)


class SimProvider:
    cloud = "sim"
    capabilities = CAPABILITIES

    def __init__(self, options: CloudOptions | None = None, apiserver_args: dict[str, str] | None = None,
                 ca: tuple[bytes, bytes] | None = None) -> None:
        self.options = options or CloudOptions()
        # Extra kube-apiserver flags, for clusters that stand in for a cloud's (the test emulators).
        self.apiserver_args = apiserver_args
        # The CA (PEM certificate, PEM unencrypted key) a new cluster's pki is issued by, for clusters that
        # stand in for a cloud's whose CA the cloud keeps (the OpenStack test bed: Magnum's cluster CA).
        self.ca = ca

    def check_node_group(self, spec: NodeGroupSpec) -> None:
        """Any catalog GPU can be simulated."""

    def check_credentials(self) -> None:
        """A local simulation needs none."""

    def cluster_steps(self, spec: PlatformSpec, client: Kube) -> list[Step]:
        """With --karpenter: Karpenter itself (its kwok provider, run beside the cluster), then the NodePools
        (and NodeOverlays) of the run's node groups with their KWOKNodeClass."""
        if not self.options.karpenter:
            return []
        def observe() -> Observed:
            drift = sim_karpenter.karpenter_drift(spec.name)
            if drift is None:
                return Observed(Change.NO_CHANGE, "")
            fresh = sim_karpenter.get_karpenter_pid(spec.name) is None
            return Observed(Change.CREATED if fresh else Change.UPDATED, drift)

        def install() -> Change:
            fresh = sim_karpenter.get_karpenter_pid(spec.name) is None
            if not sim_karpenter.ensure_karpenter(spec.name):
                return Change.NO_CHANGE
            return Change.CREATED if fresh else Change.UPDATED

        return [Step("install-karpenter", observe, install),
                stack_karpenter.nodepool_step(client, lambda: karpenter_objects(spec))]

    # -- clusters -------------------------------------------------------------------------

    def ensure_cluster(self, name: str) -> Change:
        """Create, start or repair the cluster. Whatever a killed gpuctl left is recognised here:
        a half-made cluster is made again; a complete one gets back its Stages, every control-plane
        component, the system node and an operator of the current code (kwok.py)."""
        kwok = sim_kwok.KwokCluster(name)
        with kwok.lock():
            if kwok.complete:
                return self._repair(kwok)
            if kwok.on_disk:
                info(f"  sim cluster {name!r} was left half-made (an interrupted create): making it again")
                kwok.remove()
            try:
                kwok.create(self.apiserver_args, self.ca)
                self._repair(kwok, fresh=True)
            except BaseException:
                kwok.remove()  # no half-made cluster left behind by a failure (a crash: see above)
                raise
            return Change.CREATED

    def ensure_kueue(self, name: str) -> Change:
        """Kueue on the sim: no chart, its CRDs (generated from Kueue's API types) and its real controller
        manager run beside the cluster (kueue.py); CREATED if either was missing, UPDATED if it was restarted."""
        return ensure_sim_kueue(name)

    def kueue_maps(self, name: str, profiles: list[str]) -> bool:
        """Whether Kueue runs here mapping exactly the DeviceClasses of these MIG profiles."""
        return maps_profiles(name, profiles)

    def prometheus_url(self, name: str) -> str:
        """The sim's Prometheus, scraping its simulated DCGM exporters (gpuctl.simulator.prometheus), started
        where it does not run: its base URL."""
        return ensure_monitoring(name)

    def _repair(self, kwok: KwokCluster, fresh: bool = False) -> Change:
        """Converge a complete cluster; STARTED when a component had to be started, UPDATED when
        anything else was missing (each repair is reported on stderr, unless `fresh`ly created)."""
        kwok.protect_keys()
        repairs = ["rewrote gpuctl's kwok Stages"] if kwok.ensure_stages() else []
        if not fresh and kwok.component_pid("kube-apiserver") is not None:
            _probe_api(kwok)
            if kwok.component_pid("kwok-controller") is None:
                _release_node_leases(kwok)
        started = kwok.ensure_started()
        self._wait_for_api(kwok)
        sim_kwok.crash_point("system-node")
        if self._ensure_system_node(kwok):
            repairs.append(f"created the system node {SYSTEM_NODE}")
        if operator := kwok.ensure_operator():
            repairs.append(operator)
        kwok.mark_complete()
        if (started or repairs) and not fresh:
            info(f"  sim cluster {kwok.name!r}: " + "; ".join((["started its stopped components"] if started else [])
                                                               + repairs))
        if started:
            return Change.STARTED
        return Change.UPDATED if repairs else Change.NO_CHANGE

    def _ensure_system_node(self, kwok: KwokCluster) -> bool:
        """An untainted CPU node for cluster services (operator, NFD master), as real clusters have;
        True if it had to be created."""
        kube = Kube.connect(kwok.kubeconfig_path)
        if kube.get_or_none("v1", "Node", SYSTEM_NODE) is not None:
            return False
        kube.create(render_system_node())
        return True

    def context_name(self, cluster: str) -> str:
        return sim_kwok.context_name(cluster)

    def node_selector(self, nodegroup: str) -> str:
        return f"{L.NODEGROUP}={nodegroup}"

    def _wait_for_api(self, kwok: KwokCluster) -> None:
        try:
            wait_for_api(Kube.connect(kwok.kubeconfig_path), API_TIMEOUT_S)
        except WaitTimeout as exc:
            raise ClusterError(f"sim cluster {kwok.name!r} did not come up: {exc.message}",
                               f"kube-apiserver log: {kwok.log_tail() or kwok.dir / 'logs'}") from None

    def get_cluster(self, name: str) -> ClusterInfo | None:
        kwok = sim_kwok.KwokCluster(name)
        if not kwok.exists:
            return None
        status = "incomplete" if not kwok.complete else "running" if kwok.running() else "stopped"
        return ClusterInfo(name, self.cloud, status, kwok.endpoint(), KUBERNETES_VERSION)

    def list_clusters(self) -> list[ClusterInfo]:
        return [info for n in sim_kwok.cluster_names() if (info := self.get_cluster(n)) is not None]

    def delete_cluster(self, name: str) -> Change:
        kwok = self._existing(name)
        self._remove_karpenter_capacity(kwok)
        kwok.delete()
        return Change.DELETED

    def _remove_karpenter_capacity(self, kwok: KwokCluster) -> None:
        """Karpenter's NodeClaims and nodes go first, through Karpenter (their finalizers are its), as on a cloud
        where they are instances that would outlive the cluster; where it no longer runs, with the rest."""
        if sim_karpenter.get_karpenter_pid(kwok.name) is None or not kwok.complete or kwok.stopped():
            return
        claims = stack_karpenter.remove_capacity(Kube.connect(kwok.kubeconfig_path), KARPENTER_DRAIN_TIMEOUT_S)
        if claims:
            info(f"  Karpenter terminated {plural(claims, 'NodeClaim')} of sim cluster {kwok.name!r}")

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        doc = yaml.safe_load(self._existing(cluster).kubeconfig_path.read_text())
        cluster_entry = doc["clusters"][0]["cluster"]
        user_entry = doc["users"][0]["user"]
        _embed(cluster_entry, "certificate-authority")
        _embed(user_entry, "client-certificate")
        _embed(user_entry, "client-key")
        name = self.context_name(cluster)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster_entry}],
            "users": [{"name": name, "user": user_entry}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }

    def _existing(self, name: str) -> KwokCluster:
        kwok = sim_kwok.KwokCluster(name)
        if not kwok.exists:
            raise NotFound(f"sim cluster {name!r} not found", "see 'gpuctl cluster list --cloud sim'")
        return kwok

    def _kube(self, cluster: str) -> Kube:
        kwok = self._existing(cluster)
        if not kwok.complete:
            raise ClusterError(f"sim cluster {cluster!r} is incomplete (its create was interrupted)",
                               f"repair it with 'gpuctl cluster create --cloud sim --name {cluster}'")
        ok, reason = self.check_control_plane(cluster)
        if not ok:
            raise ClusterError(reason, f"start it with 'gpuctl cluster create --cloud sim --name {cluster}'")
        return Kube.connect(kwok.kubeconfig_path)

    def check_control_plane(self, cluster: str) -> tuple[bool, str]:
        """(ok, reason): every control-plane process of the cluster runs; else which do not, with the last
        line of each one's log. The simulated operator restarts a component that exits (supervisor.py),
        so a wait that sees one stopped for longer than SUPERVISOR_GRACE_S can fail at once, naming it."""
        kwok = sim_kwok.KwokCluster(cluster)
        stopped = kwok.stopped()
        if not stopped:
            return True, ""
        if len(stopped) == len(sim_kwok.COMPONENTS):
            return False, f"sim cluster {cluster!r} is stopped"
        said = "; ".join(f"{c}: {tail[-160:]}" for c in stopped if (tail := kwok.log_tail(c, 1)))
        return False, (f"sim cluster {cluster!r}: {', '.join(stopped)} not running" + (f" ({said})" if said else ""))

    # -- node groups ----------------------------------------------------------------------

    def _group_nodes(self, kube: Kube, group: str) -> dict[str, KubeObject]:
        """The node group's own nodes: not those Karpenter launched for it, which are Karpenter's to remove."""
        items = kube.list("v1", "Node", labels=f"{L.NODEGROUP}={group},!{L.KARPENTER_NODEPOOL}",
                          what=f"listing nodes of node group {group!r}")
        return {n.name: n for n in items}

    def ensure_node_group(self, cluster: str, spec: NodeGroupSpec) -> Change:
        kube = self._kube(cluster)
        existing = self._group_nodes(kube, spec.name)
        if existing:
            current = self._describe(cluster, spec.name, list(existing.values()))
            if current.gpu != spec.gpu.name:
                raise UsageError("--gpu", f"node group {spec.name!r} already has {current.gpu} GPUs, not "
                                 f"{spec.gpu.name}", "a node group's GPU cannot change: add a node group "
                                 "with another name")
            if current.gpus_per_node != spec.gpus_per_node:
                raise UsageError("--gpus-per-node", f"node group {spec.name!r} has {current.gpus_per_node} "
                                 f"GPUs per node, not {spec.gpus_per_node}", "add a node group with another name")
        change = self._converge(cluster, kube, spec, existing)
        low, high = spec.bounds()
        self._store(cluster, spec.name, {"gpu": spec.gpu.name, "gpusPerNode": spec.gpus_per_node,
                                         "minNodes": low, "maxNodes": high})
        return change

    def scale_node_group(self, cluster: str, name: str, nodes: int, min_nodes: int | None = None,
                         max_nodes: int | None = None) -> Change:
        """To `nodes` nodes, 0 included (the group stays, as a cloud's does); the sim has no autoscaler, its
        bounds are kept for `nodegroup list` only."""
        kube = self._kube(cluster)
        existing = self._group_nodes(kube, name)
        current = self._describe(cluster, name, list(existing.values())) if existing else self._stored_info(cluster,
                                                                                                           name)
        if current is None:
            raise NotFound(f"node group {name!r} not found in sim cluster {cluster!r}",
                           f"see 'gpuctl nodegroup list --cloud sim --cluster {cluster}'")
        low, high = scaled_bounds((current.min_nodes or 0, current.max_nodes), nodes, min_nodes, max_nodes)
        spec = NodeGroupSpec(name, get_gpu(current.gpu), nodes, current.gpus_per_node)
        change = self._converge(cluster, kube, spec, existing)
        if not existing:  # a group of 0 nodes scaled: not a new group
            change = Change.UPDATED if nodes else Change.NO_CHANGE
        self._store(cluster, name, {"gpu": current.gpu, "gpusPerNode": current.gpus_per_node, "minNodes": low,
                                    "maxNodes": high})
        rebounded = (current.min_nodes, current.max_nodes) != (low, high)
        return Change.UPDATED if change is Change.NO_CHANGE and rebounded else change

    # The sim's own record of its node groups (a cloud keeps one): what a group of 0 nodes is, and its bounds.
    def _store_path(self, cluster: str) -> Path:
        return sim_kwok.KwokCluster(cluster).dir / "nodegroups.json"

    def _stored(self, cluster: str) -> dict[str, dict[str, Any]]:
        path = self._store_path(cluster)
        try:
            doc = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def _store(self, cluster: str, name: str, entry: dict[str, Any] | None) -> None:
        stored = self._stored(cluster)
        if entry is None:
            stored.pop(name, None)
        else:
            stored[name] = entry
        write_atomic(self._store_path(cluster), json.dumps(stored, indent=1, sort_keys=True) + "\n")

    def _stored_info(self, cluster: str, name: str) -> NodeGroupInfo | None:
        """A stored node group that has no node (scaled to 0)."""
        entry = self._stored(cluster).get(name)
        if entry is None:
            return None
        try:
            return NodeGroupInfo(name, cluster, str(entry["gpu"]), 0, 0, int(entry["gpusPerNode"]),
                                 min_nodes=int(entry.get("minNodes", 0)),
                                 max_nodes=None if entry.get("maxNodes") is None else int(entry["maxNodes"]))
        except (KeyError, TypeError, ValueError):
            return None

    def _converge(self, cluster: str, kube: Kube, spec: NodeGroupSpec, existing: dict[str, KubeObject]) -> Change:
        """Create missing nodes and delete surplus ones; write only differences.

        After creation a node's GPU labels and capacity belong to the GPU stack (GFD, the device
        plugin), as on a real cloud: only the node-group identity labels are kept in line here.
        """
        desired = {node_name(spec.name, i): render_node(spec, i) for i in range(spec.nodes)}
        writes: list[Callable[[], object]] = []
        for name, body in desired.items():
            node = existing.get(name)
            if node is None:
                writes.append(partial(kube.create, body))
                continue
            identity = {k: body["metadata"]["labels"][k] for k in IDENTITY_LABELS}
            if any(node.labels.get(k) != v for k, v in identity.items()):
                writes.append(partial(kube.patch, "v1", "Node", name, {"metadata": {"labels": identity}}))
        writes += [partial(kube.delete, "v1", "Node", name) for name in sorted(set(existing) - set(desired))]
        with requesting(f"converging node group {spec.name!r}"), ThreadPoolExecutor(max_workers=WORKERS) as pool:
            list(pool.map(lambda write: write(), writes))
        self._wait_ready(cluster, kube, spec.name, set(desired))
        if not existing:
            return Change.CREATED
        return Change.UPDATED if writes else Change.NO_CHANGE

    def _wait_ready(self, cluster: str, kube: Kube, group: str, names: set[str]) -> None:
        """Until the nodes are Ready (the kwok controller makes them so); a control plane with a process
        stopped for SUPERVISOR_GRACE_S ends the wait at once, naming it, not at the deadline."""
        deadline = time.monotonic() + NODES_READY_TIMEOUT_S
        stopped_since: float | None = None
        while True:
            looked = time.monotonic()
            nodes = self._group_nodes(kube, group)
            not_ready = sorted(n for n in names if n not in nodes or not _ready(nodes[n]))
            if not not_ready:
                return
            ok, reason = self.check_control_plane(cluster)
            now = time.monotonic()
            stopped_since = None if ok else stopped_since or now
            if stopped_since is not None and now - stopped_since > SUPERVISOR_GRACE_S:
                raise ClusterError(f"nodes not Ready: {reason}",
                                   f"restart it with 'gpuctl cluster create --cloud sim --name {cluster}'; logs in "
                                   f"{sim_kwok.KwokCluster(cluster).dir / 'logs'}")
            if now > deadline:
                raise WaitTimeout(f"nodes not Ready after {NODES_READY_TIMEOUT_S:.0f}s: {', '.join(not_ready)}",
                                  "check the kwok-controller log of the sim cluster")
            time.sleep(pause_after(time.monotonic() - looked, 0.25))

    def _describe(self, cluster: str, group: str, nodes: list[KubeObject]) -> NodeGroupInfo:
        labels = nodes[0].labels
        stored = self._stored(cluster).get(group) or {}
        low, high = stored.get("minNodes", len(nodes)), stored.get("maxNodes", len(nodes))
        return NodeGroupInfo(
            name=group,
            cluster=cluster,
            gpu=labels.get(L.GPU_MODEL, "?"),
            nodes=len(nodes),
            ready_nodes=sum(_ready(n) for n in nodes),
            gpus_per_node=int(labels.get(L.GPUS_PER_NODE, 0)),
            min_nodes=min(int(low), len(nodes)),
            max_nodes=max(int(high), len(nodes)) if high is not None else None,
        )

    def get_node_group(self, cluster: str, name: str) -> NodeGroupInfo | None:
        nodes = self._group_nodes(self._kube(cluster), name)
        return self._describe(cluster, name, list(nodes.values())) if nodes else self._stored_info(cluster, name)

    def list_node_groups(self, cluster: str) -> list[NodeGroupInfo]:
        items = self._kube(cluster).list("v1", "Node", labels=f"{L.NODEGROUP},!{L.KARPENTER_NODEPOOL}",
                                         what="listing nodes")
        groups: dict[str, list[KubeObject]] = {}
        for node in items:
            groups.setdefault(node.labels[L.NODEGROUP], []).append(node)
        found = {g: self._describe(cluster, g, nodes) for g, nodes in groups.items()}
        for name in self._stored(cluster):
            if name not in found and (empty := self._stored_info(cluster, name)) is not None:
                found[name] = empty
        return [found[g] for g in sorted(found)]

    def delete_node_group(self, cluster: str, name: str) -> Change:
        kube = self._kube(cluster)
        nodes = self._group_nodes(kube, name)
        if not nodes and name not in self._stored(cluster):
            raise NotFound(f"node group {name!r} not found in sim cluster {cluster!r}",
                           f"see 'gpuctl nodegroup list --cloud sim --cluster {cluster}'")
        if nodes:
            with requesting(f"deleting node group {name!r}"):  # its own nodes, in one request
                kube.delete_all("v1", "Node", labels=f"{L.NODEGROUP}={name},!{L.KARPENTER_NODEPOOL}")
        self._store(cluster, name, None)
        return Change.DELETED
