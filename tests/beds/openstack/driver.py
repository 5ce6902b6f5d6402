"""The bed's Magnum cluster driver: Magnum clusters are gpuctl sim clusters.

Runs inside the bed's Magnum process (the bed venv, which has none of gpuctl's dependencies): every
piece of sim work is a subprocess of gpuctl's venv (`python -m tests.beds.openstack.dataplane ...`,
see dataplane.py), with the environment the bed was started from (GPUCTL_BED_DATAPLANE_ENV names it).

As a cloud does, each operation returns at once (Magnum answers 202/204) and its work runs in a
background thread after a short delay; the conductor's periodic `sync_cluster_status` (every ~10 s)
calls update_cluster_status, which moves statuses *_IN_PROGRESS -> *_COMPLETE (or *_FAILED with the
data plane's error as status_reason) and sets api_address. A deleted cluster's record goes (the
periodic job destroys it on DELETE_COMPLETE) only once its sim cluster is gone; a deleted node group's
record goes once its nodes are.

The sim cluster of a Magnum cluster is named from its name and uuid (Magnum names can repeat) and kept
in the cluster's stack_id, the field Magnum's drivers use for what backs a cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from magnum import objects
from magnum.common import exception
from magnum.common.x509 import operations as x509_operations
from magnum.conductor.handlers.common import cert_manager
from magnum.drivers.common import driver
from magnum.objects import fields
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

OS_DISTRO = "gpuctl-sim"  # the bed image's os_distro: this driver's
DELAY_S = float(os.environ.get("GPUCTL_BED_OP_DELAY_S", "2.0"))  # a cloud never answers at once
OP_TIMEOUT_S = 600.0
ENV_FILE = "GPUCTL_BED_DATAPLANE_ENV"  # JSON: python, cwd and environment of the data plane subprocess
STATUS = fields.ClusterStatus


@dataclass
class Op:
    """One background operation of the data plane; `error` is set when it failed."""

    kind: str
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    result: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


# Driver instances are made per call (stevedore loads the class): the ledger lives in the module.
_LOCK = threading.Lock()
_OPS: dict[str, Op] = {}  # by cluster or node group uuid
_MISSING: dict[str, float] = {}  # records in progress with no operation: since when
LOST_AFTER_S = 120.0  # the conductor saves a status before it calls the driver: allow for that


def sim_name(cluster) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", (cluster.name or "cluster").lower()).strip("-")[:40] or "cluster"
    return f"{base}-{cluster.uuid[:8]}"


def _node_attrs(nodegroup) -> tuple[str, ...]:
    """Microversion 1.14's node_labels / node_taints, which Magnum's Kubernetes drivers put on every node
    of the group (the Cluster API driver through its MachineDeployment's node template), for the data plane."""
    return ("--node-labels", json.dumps(nodegroup.node_labels or {}),
            "--node-taints", json.dumps(nodegroup.node_taints or []))


def _dataplane(*args: str) -> dict:
    spec = json.loads(Path(os.environ[ENV_FILE]).read_text())
    command = [spec["python"], "-m", "tests.beds.openstack.dataplane", *args]
    LOG.info("data plane: %s", " ".join(args))
    proc = subprocess.run(command, cwd=spec["cwd"], env=spec["env"], capture_output=True, text=True,
                          timeout=OP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"data plane exited {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _start(key: str, kind: str, work) -> None:
    op = Op(kind)

    def run() -> None:
        time.sleep(DELAY_S)
        try:
            op.result = work() or {}
        except Exception as exc:
            LOG.exception("%s %s failed", kind, key)
            op.error = f"{kind} failed: {exc}"
        LOG.info("%s %s finished in %.1fs%s", kind, key, time.monotonic() - op.started,
                 f" ({op.error})" if op.error else "")
        op.done.set()

    with _LOCK:
        _OPS[key] = op
        _MISSING.pop(key, None)
    threading.Thread(target=run, name=f"bed-{kind}-{key[:8]}", daemon=True).start()


def _finished(key: str) -> Op | None:
    """The finished operation of a record, None while it runs. A record in progress with no operation
    (the conductor restarted) gets a failed one. It stays in the ledger until _forget: a status save that
    fails (SQLite answers a concurrent writer "database is locked" at once) is retried by the next sync,
    as Magnum's conductor retries its own."""
    with _LOCK:
        op = _OPS.get(key)
        if op is None:
            if time.monotonic() - _MISSING.setdefault(key, time.monotonic()) < LOST_AFTER_S:
                return None
            del _MISSING[key]
            op = _OPS[key] = Op("operation", error="the bed's conductor lost track of this operation (it restarted)")
            op.done.set()
        return op if op.done.is_set() else None


def _forget(key: str) -> None:
    """The record's status is saved: its operation leaves the ledger."""
    with _LOCK:
        _OPS.pop(key, None)


def _ca_files(context, cluster, workdir: Path) -> tuple[Path, Path]:
    """Magnum's cluster CA (certificate, decrypted key) as files for the data plane."""
    ca = cert_manager.get_cluster_ca_certificate(cluster, context=context)
    key = x509_operations.decrypt_key(ca.get_private_key(), ca.get_private_key_passphrase())
    cert_path, key_path = workdir / "ca.crt", workdir / "ca.key"
    cert = ca.get_certificate()
    cert_path.write_bytes(cert if isinstance(cert, bytes) else cert.encode())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key if isinstance(key, bytes) else key.encode())
    return cert_path, key_path


class SimDriver(driver.Driver):
    """Kubernetes on gpuctl's sim (server_type vm, os_distro gpuctl-sim)."""

    @property
    def provides(self):
        return [{"server_type": "vm", "os": OS_DISTRO, "coe": "kubernetes"}]

    # -- clusters ---------------------------------------------------------------------------

    def create_cluster(self, context, cluster, cluster_create_timeout):
        sim = sim_name(cluster)
        cluster.stack_id = sim  # saved by the conductor, which copies it to the node groups
        workdir = Path(tempfile.mkdtemp(prefix=f"ca-{sim}-"))
        ca_cert, ca_key = _ca_files(context, cluster, workdir)
        groups = [(ng.name, ng.flavor_id, ng.node_count) for ng in cluster.nodegroups if ng.role != "master"]

        def work() -> dict:
            try:
                result = _dataplane("create-cluster", sim, "--ca-cert", str(ca_cert), "--ca-key", str(ca_key))
            finally:
                for path in (ca_cert, ca_key):
                    path.unlink(missing_ok=True)
                workdir.rmdir()
            for name, flavor, count in groups:
                _dataplane("nodes", sim, name, flavor, str(count))
            return result

        _start(cluster.uuid, "create", work)

    def update_cluster(self, context, cluster, scale_manager=None, rollback=False):
        """Magnum's PATCH node_count: the default worker node group, already saved with its new count."""
        self._resize(cluster, cluster.default_ng_worker)

    def resize_cluster(self, context, cluster, resize_manager, node_count, nodes_to_remove,
                       nodegroup=None):
        self._resize(cluster, nodegroup or cluster.default_ng_worker)

    def _resize(self, cluster, nodegroup) -> None:
        nodegroup.status = STATUS.UPDATE_IN_PROGRESS
        nodegroup.status_reason = None
        nodegroup.save()
        sim, name, flavor, count = cluster.stack_id, nodegroup.name, nodegroup.flavor_id, nodegroup.node_count
        attrs = _node_attrs(nodegroup)
        _start(nodegroup.uuid, "resize", lambda: _dataplane("nodes", sim, name, flavor, str(count), *attrs))

    def delete_cluster(self, context, cluster):
        sim = cluster.stack_id or sim_name(cluster)
        _start(cluster.uuid, "delete", lambda: _dataplane("delete-cluster", sim))

    def upgrade_cluster(self, context, cluster, cluster_template, max_batch_size, nodegroup,
                        scale_manager=None, rollback=False):
        raise exception.NotSupported(operation="Upgrading a cluster of the gpuctl sim driver")

    # -- node groups ------------------------------------------------------------------------

    def create_nodegroup(self, context, cluster, nodegroup):
        nodegroup.stack_id = cluster.stack_id  # saved by the conductor
        sim, name, flavor, count = cluster.stack_id, nodegroup.name, nodegroup.flavor_id, nodegroup.node_count
        attrs = _node_attrs(nodegroup)
        _start(nodegroup.uuid, "create", lambda: _dataplane("nodes", sim, name, flavor, str(count), *attrs))

    def update_nodegroup(self, context, cluster, nodegroup):
        """PATCH: min/max_node_count (nothing to do in the sim) and node_labels/node_taints, which reach the
        group's nodes (node_count changes through resize)."""
        sim, name, flavor, count = cluster.stack_id, nodegroup.name, nodegroup.flavor_id, nodegroup.node_count
        attrs = _node_attrs(nodegroup)
        _start(nodegroup.uuid, "update", lambda: _dataplane("nodes", sim, name, flavor, str(count), *attrs))

    def delete_nodegroup(self, context, cluster, nodegroup):
        nodegroup.save()  # the conductor set DELETE_IN_PROGRESS and saves nothing after us
        sim, name = cluster.stack_id, nodegroup.name
        _start(nodegroup.uuid, "delete", lambda: _dataplane("delete-nodes", sim, name))

    # -- status -----------------------------------------------------------------------------

    def update_cluster_status(self, context, cluster, use_admin_ctx=False):
        """Called by the conductor's periodic sync for clusters *_IN_PROGRESS: finish what is done."""
        busy = False
        failed: list[str] = []
        for ng in objects.NodeGroup.list(context, cluster.uuid):
            if not ng.status.endswith("_IN_PROGRESS") or ng.status == STATUS.CREATE_IN_PROGRESS \
                    and cluster.status == STATUS.CREATE_IN_PROGRESS:
                continue  # the cluster's own create finishes its default node groups (below)
            op = _finished(ng.uuid)
            if op is None:
                busy = True
                continue
            action = ng.status.removesuffix("_IN_PROGRESS")
            if action == "DELETE" and op.error is None:
                ng.destroy()
                _forget(ng.uuid)
                continue
            ng.status = f"{action}_FAILED" if op.error else f"{action}_COMPLETE"
            ng.status_reason = op.error
            ng.save()
            _forget(ng.uuid)
            if op.error:
                failed.append(f"node group {ng.name}: {op.error}")
        if cluster.status in (STATUS.CREATE_IN_PROGRESS, STATUS.DELETE_IN_PROGRESS):
            op = _finished(cluster.uuid)
            if op is None:
                return
            action = cluster.status.removesuffix("_IN_PROGRESS")
            if op.error is None and action == "CREATE":
                cluster.api_address = op.result.get("api_address")
                cluster.coe_version = op.result.get("coe_version")
            for ng in objects.NodeGroup.list(context, cluster.uuid):
                if ng.status == STATUS.CREATE_IN_PROGRESS and action == "CREATE":
                    ng.status = STATUS.CREATE_FAILED if op.error else STATUS.CREATE_COMPLETE
                    ng.status_reason = op.error
                    if op.error is None and ng.role == "master":
                        ng.node_addresses = ["127.0.0.1"]  # the sim kube-apiserver's
                    ng.save()
            cluster.status = f"{action}_FAILED" if op.error else f"{action}_COMPLETE"
            cluster.status_reason = op.error
            cluster.save()  # DELETE_COMPLETE: the periodic job destroys the record and its node groups
            _forget(cluster.uuid)
            return
        if busy:
            return
        if cluster.status == STATUS.UPDATE_IN_PROGRESS:
            cluster.status = STATUS.UPDATE_FAILED if failed else STATUS.UPDATE_COMPLETE
            cluster.status_reason = "; ".join(failed) or None
            cluster.save()

    # -- not offered ------------------------------------------------------------------------

    def create_federation(self, context, federation):
        raise NotImplementedError("federations are not offered by the gpuctl sim driver")

    def update_federation(self, context, federation):
        raise NotImplementedError("federations are not offered by the gpuctl sim driver")

    def delete_federation(self, context, federation):
        raise NotImplementedError("federations are not offered by the gpuctl sim driver")
