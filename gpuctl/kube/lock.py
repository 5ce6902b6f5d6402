"""One apply at a time per cluster: a coordination.k8s.io Lease, held and renewed while applying.

A second apply waits for the holder to finish (or its lease to expire) up to a deadline, then
fails naming the holder. Only an apply that has something to write takes the lock, so a
converged re-apply still sends no write.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from gpuctl.kube.client import get_or_none, k8s_client
from gpuctl.kube.errors import KubeApiError, KubeConflict, KubeNotFound, requesting
from gpuctl.kube.kube import Kube
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.output import info
from gpuctl.util.progress import waiting

LEASE = "gpuctl-apply"
LEASE_NAMESPACE = "kube-system"
DURATION_S = 30
RENEW_EVERY_S = 10
REPORT_EVERY_S = 5


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _body(holder: str, resource_version: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": LEASE, "namespace": LEASE_NAMESPACE}
    if resource_version:
        metadata["resourceVersion"] = resource_version  # optimistic concurrency: one taker wins
    now = _stamp(_now())
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": DURATION_S, "acquireTime": now,
                     "renewTime": now}}


def _expired(lease: Any) -> bool:
    spec = lease.spec
    if not spec.holder_identity or spec.renew_time is None:
        return True
    return (_now() - spec.renew_time).total_seconds() > (spec.lease_duration_seconds or DURATION_S)


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if it is gone:
    with the pid it names one process, never a later one that reused the pid."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces


def holder_identity() -> str:
    """host/pid/start-ticks.random: enough for a later gpuctl on this host to prove this one dead."""
    return f"{socket.gethostname()}/{os.getpid()}/{_start_ticks(os.getpid())}.{uuid.uuid4().hex[:6]}"


def holder_is_dead(holder: str) -> bool:
    """True only when `holder` was a gpuctl on this host whose process is gone (pid gone, or reused by a
    process that started at another time); a holder elsewhere, or in an unknown form, may be alive."""
    parts = holder.split("/")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    ticks = parts[2].split(".", 1)[0] if "." in parts[2] else None
    current = _start_ticks(int(parts[1]))
    return current is None or (ticks is not None and current != ticks)


def clear_dead_holder(kube: Kube) -> str | None:
    """Delete the apply lease when a dead gpuctl on this host holds it (a killed apply); the holder, if so.
    Converged or not, a rerun calls this, so no later apply waits out a dead holder's lease."""
    api = k8s_client.CoordinationV1Api(kube.client)  # the Lease's typed API: the lock is the door's own
    with requesting("reading the apply lease"):
        lease = get_or_none(api.read_namespaced_lease, LEASE, LEASE_NAMESPACE)
    if lease is None:
        return None
    holder = lease.spec.holder_identity or ""
    if not holder or not holder_is_dead(holder):
        return None
    try:  # only that lease: a live apply that took it over meanwhile keeps its own
        with requesting("clearing the apply lease of a dead gpuctl"):
            api.delete_namespaced_lease(LEASE, LEASE_NAMESPACE, body=k8s_client.V1DeleteOptions(
                preconditions=k8s_client.V1Preconditions(resource_version=lease.metadata.resource_version)))
    except (KubeNotFound, KubeConflict):
        return None
    return holder


def _try_acquire(api: Any, holder: str) -> Any | None:
    """Take the lease if it is free, expired or held by a dead gpuctl on this host; return the current one
    when someone else holds it."""
    with requesting("reading the apply lease"):
        lease = get_or_none(api.read_namespaced_lease, LEASE, LEASE_NAMESPACE)
    if lease is None:
        try:
            with requesting("creating the apply lease"):
                api.create_namespaced_lease(LEASE_NAMESPACE, _body(holder))
            return None
        except KubeConflict:  # another apply created it first
            with requesting("reading the apply lease"):
                return api.read_namespaced_lease(LEASE, LEASE_NAMESPACE)
    if not _expired(lease) and not holder_is_dead(lease.spec.holder_identity or ""):
        return lease
    try:
        with requesting("taking over the apply lease"):
            api.replace_namespaced_lease(LEASE, LEASE_NAMESPACE, _body(holder, lease.metadata.resource_version))
        return None
    except KubeConflict:
        with requesting("reading the apply lease"):
            return api.read_namespaced_lease(LEASE, LEASE_NAMESPACE)


@contextmanager
def cluster_lock(kube: Kube, cluster: str, timeout: float) -> Iterator[None]:
    api = k8s_client.CoordinationV1Api(kube.client)
    holder = holder_identity()
    if (other := _try_acquire(api, holder)) is not None:  # said at once: a short wait is a wait too
        info(f"  waiting for the apply lock on cluster {cluster!r}: another gpuctl apply holds it "
             f"({other.spec.holder_identity})")
        with waiting("the apply lock", timeout, every=REPORT_EVERY_S) as wait:
            while other is not None:
                if wait.elapsed > timeout:
                    raise WaitTimeout(f"another gpuctl apply holds the lock on cluster {cluster!r} "
                                      f"(lease {LEASE_NAMESPACE}/{LEASE}, holder {other.spec.holder_identity})",
                                      "wait for it to finish, or raise --lock-timeout")
                wait.update(what=f"the apply lock held by {other.spec.holder_identity}")
                time.sleep(1)
                other = _try_acquire(api, holder)
        info(f"  took the apply lock on cluster {cluster!r} after waiting {wait.elapsed:.0f}s")
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_EVERY_S):
            try:
                lease = api.read_namespaced_lease(LEASE, LEASE_NAMESPACE)
                if lease.spec.holder_identity != holder:
                    return
                api.patch_namespaced_lease(LEASE, LEASE_NAMESPACE, {"spec": {"renewTime": _stamp(_now())}},
                                           _content_type="application/merge-patch+json")
            except KubeApiError:  # the apply itself will report a broken API server
                return

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            lease = api.read_namespaced_lease(LEASE, LEASE_NAMESPACE)
            if lease.spec.holder_identity == holder:
                api.delete_namespaced_lease(LEASE, LEASE_NAMESPACE)
        except KubeApiError:  # an unreleased lease expires after DURATION_S anyway
            pass
