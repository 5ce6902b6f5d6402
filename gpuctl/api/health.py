"""The health of a running GPU platform: what is wrong, and its safe repairs (gpuctl.ops.doctor)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.api.reach import client
from gpuctl.model.device_taints import NO_SCHEDULE, check_effect
from gpuctl.model.naming import check_duration, check_name, check_text
from gpuctl.ops.doctor.doctor import FIX_TIMEOUT_S, GRACE_S
from gpuctl.ops.doctor.doctor import doctor as diagnose
from gpuctl.ops.doctor.doctor import fix as repair
from gpuctl.ops.doctor.dra_repair import check_effect_applies
from gpuctl.util.errors import UsageError

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget
    from gpuctl.ops.doctor.findings import Finding


def doctor(nodegroup: str | None = None, node: str | None = None, fix: bool = False,
           timeout: float = FIX_TIMEOUT_S, target: ClusterTarget | None = None,
           grace: float = GRACE_S, taint_effect: str = NO_SCHEDULE) -> list[Finding]:
    """The findings (read-only); with `fix`, the safe repairs done first (each said on stderr) and the findings
    read again: what is left. `taint_effect`: of the DeviceTaintRule --fix gives a failed GPU in DRA mode."""
    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    if node is not None:
        check_text(node, "--node")
    check_duration(timeout, "--timeout")
    check_duration(grace, "--grace")
    check_effect(taint_effect)
    if taint_effect != NO_SCHEDULE and not fix:
        raise UsageError("--taint-effect", "only --fix taints a failed GPU's device", "add --fix")
    kube = client(target)
    check_effect_applies(kube, taint_effect)
    findings = diagnose(kube, nodegroup, node)
    return repair(kube, findings, nodegroup, node, timeout, grace, taint_effect) \
        if fix and any(f.fixable for f in findings) \
        else findings
