"""A whole platform: what `apply` would do, step by step (plan), and doing it (apply)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.model.naming import check_duration
from gpuctl.model.target import DEFAULT_TARGET, check_context
from gpuctl.ops.platform.apply import LOCK_TIMEOUT_S
from gpuctl.ops.platform.apply import apply_platform as apply
from gpuctl.ops.platform.plan import plan_platform as plan
from gpuctl.util.waiting import wait_limit

if TYPE_CHECKING:
    from gpuctl.model.spec import PlatformSpec
    from gpuctl.model.target import ClusterTarget
    from gpuctl.ops.platform.apply import PlatformResult
    from gpuctl.ops.platform.plan import PlannedStep
    from gpuctl.ops.platform.results import Reporter


def plan_platform(spec: PlatformSpec, target: ClusterTarget | None = None,
                  write_context: str | None = None) -> list[PlannedStep]:
    """What `apply_platform` would do, step by step; writes nothing (gpuctl.ops.platform.plan). The cluster is read as
    apply reads it: through `target`'s context, else the one apply would write (`write_context`, else the
    provider's name) in `target`'s kubeconfig."""
    if write_context is not None:
        check_context(write_context)
    return plan(spec, target or DEFAULT_TARGET, write_context)


def apply_platform(spec: PlatformSpec, target: ClusterTarget | None = None, report: Reporter | None = None,
                   lock_timeout: float | None = None, write_context: str | None = None,
                   timeout: float | None = None) -> PlatformResult:
    """Converge the cluster to `spec` (gpuctl.ops.platform.apply.apply_platform), each step told to `report`.
    write-kubeconfig merges the cluster's context, named `write_context` (else the provider's name), into
    `target`'s kubeconfig; the cluster is then read through `target`'s context, else the one written. On an
    existing cluster every write runs under its apply lock, waited for up to `lock_timeout` seconds. `timeout`:
    the most seconds any one wait for a state (capacity, MIG) may take; without it a wait ends only when its
    progress stalls (gpuctl.util.waiting)."""
    if timeout is not None:
        check_duration(timeout, "--timeout")
    with wait_limit(timeout):
        return apply(spec, target or DEFAULT_TARGET, report or (lambda _: None),
                     lock_timeout=LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout,
                     write_context=write_context)
