"""Waiting for a Magnum operation to take effect and finish.

Magnum answers create, PATCH, resize and delete with 202/204 and acts afterwards: the API casts
the operation to the conductor, which writes the record (magnum/api/controllers/v1/cluster.py
`_post` and nodegroup.py `post` only build the object; conductor/handlers/cluster_conductor.py
`cluster_create` calls `cluster.create()`; `cluster_delete` and `cluster_resize` set
*_IN_PROGRESS). So right after the answer a new record can still be missing (404) and an old one
still shows its previous status. Neither is final: an operation has taken effect once the record
appears (create) or its status or `updated_at` differs from what it was before the request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from gpuctl.util.errors import CloudError, WaitTimeout
from gpuctl.util.output import info

POLL_START_S, POLL_MAX_S, PROGRESS_EVERY_S = 1.0, 5.0, 30.0
# How long Magnum may take to start an accepted operation (the RPC cast reaching a conductor).
ACCEPT_TIMEOUT_S = 300.0
# A deletion's last status: the conductor's periodic sync then destroys the record (magnum/service/periodic.py
# ClusterUpdateJob: DELETE_COMPLETE destroys the cluster), so a poll may see it before the 404.
DELETED = "DELETE_COMPLETE"

Json = dict[str, Any]
Read = Callable[[], "Json | None"]


def is_busy(status: str) -> bool:
    return status.endswith("_IN_PROGRESS")


def mark(record: Json | None) -> tuple[str, str] | None:
    """What an operation must change: the record's status and the time it was last written."""
    return (record["status"], str(record.get("updated_at"))) if record else None


def wait_for_status(read: Read, what: str, goal: Collection[str] | None, timeout: float, cleanup: str,
                    before: Json | None = None, created: bool = False) -> Json | None:
    """Poll `read` until the operation has taken effect and finished; return the record (None: gone).

    `before` is the record as it was before the request (its status and updated_at, if unchanged,
    mean "not started yet"); `created` says the request made the record (missing means "not yet").
    The final status must be in `goal` (None: the record must be gone). Any other end
    (CREATE_FAILED, DELETE_FAILED...) raises CloudError with Magnum's status_reason and `cleanup`.
    Progress goes to stderr when the status changes and every PROGRESS_EVERY_S.
    """
    started = time.monotonic()
    delay, last, said, seen = POLL_START_S, "", started, False
    stale = mark(before)
    while True:
        current = read()
        elapsed = time.monotonic() - started
        if current is not None:
            seen = True
        if current is None:
            if goal is None:
                return None
            if seen or not created:
                raise CloudError(f"{what} was deleted while gpuctl waited for it", "create it again")
            state = "not visible yet"
        elif stale is not None and mark(current) == stale:
            state = f"{current['status']}, operation not started yet"
        elif is_busy(current["status"]):
            state = current["status"]
        else:
            break
        waited_for_start = state.endswith("not started yet") or state == "not visible yet"
        limit = min(timeout, ACCEPT_TIMEOUT_S) if waited_for_start else timeout
        if elapsed > limit:
            raise WaitTimeout(f"{what} still {state} after {elapsed:.0f}s", cleanup)
        if state != last or time.monotonic() - said >= PROGRESS_EVERY_S:
            info(f"waiting for {what}: {state} ({elapsed:.0f}s of {timeout:.0f}s)")
            last, said = state, time.monotonic()
        time.sleep(delay)
        delay = min(delay * 1.5, POLL_MAX_S)
    status = current["status"]
    if goal is not None and status in goal:
        return current
    if goal is None and status == DELETED:  # Magnum drops the record a moment later (its periodic sync)
        return None
    reason = current.get("status_reason") or "Magnum gave no reason"
    raise CloudError(f"{what} is {status}: {reason}", cleanup)


def wait_until_visible(read: Read, what: str, timeout: float) -> Json | None:
    """Poll `read` until the record exists; None if it has not appeared within `timeout`."""
    deadline = time.monotonic() + timeout
    delay = POLL_START_S
    while (current := read()) is None:
        if time.monotonic() > deadline:
            info(f"{what} did not appear in Magnum within {timeout:.0f}s")
            return None
        time.sleep(delay)
        delay = min(delay * 1.5, POLL_MAX_S)
    return current
