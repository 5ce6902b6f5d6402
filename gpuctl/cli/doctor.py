"""`gpuctl doctor`: what is wrong with the running GPU platform, why, and its repair (exit 6 when anything is)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.settings import settings
from gpuctl.cli.types import seconds
from gpuctl.util.errors import ValidationFailed
from gpuctl.util.output import emit, info, is_table, section

COLUMNS = ("check", "node", "cause")  # a finding of no node (the stack, a policy) names its object in its cause
WIDE = ("severity", "object", "evidence", "reference", "repair")


def doctor(
    ctx: typer.Context,
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Look at this node group's nodes only.")] = None,
    node: Annotated[Optional[str], typer.Option("--node", metavar="NODE", help="Look at this GPU node only.")] = None,
    fix: Annotated[bool, typer.Option("--fix", help="Do the safe repairs (restart a device plugin that serves nothing, re-apply a deleted tenant policy, cordon a node with a failed GPU and evict its GPU pods, uncordon it once healthy; in DRA mode taint the failed GPU's device with a DeviceTaintRule instead of cordoning, evict the pods using it, delete the rule once healthy), each said first; then look again.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", parser=seconds, help="Seconds --fix waits for its repairs to take.")] = 120.0,
    grace: Annotated[float, typer.Option("--grace", parser=seconds, help="Seconds --fix waits for PodDisruptionBudgets to allow the eviction of a failed GPU's node's GPU pods.")] = 300.0,
    taint_effect: Annotated[str, typer.Option("--taint-effect", metavar="EFFECT", help="DRA mode: the effect of the DeviceTaintRule --fix gives a failed GPU's device: NoSchedule (no new claim gets it; --fix evicts the pods using it through the Eviction API, PodDisruptionBudgets respected for --grace) or NoExecute (kube-controller-manager deletes those pods at once, no PodDisruptionBudget consulted).")] = "NoSchedule",
) -> None:
    """Find what is wrong with the running GPU platform: each finding with its evidence, its cause, the upstream
    issue or bulletin, and the command that repairs it. Read-only unless --fix.

    Checks: a GPU Operator gone (release uninstalled or deleted by hand), node groups missing nodes, the stack's
    versions against NVIDIA's security bulletins, MIG changes that failed or wedged, device plugins that serve no
    GPU, GPUs the device plugin marked unhealthy (with their XID where the DCGM metrics are reachable) or, in DRA
    mode, that the DRA driver tainted, gpuctl's DeviceTaintRules of GPUs healthy again, GPU nodes' taints against
    their node groups, the tenants' GPU fence and tolerations. Exit 0 when nothing is wrong, 6 when
    something is (after --fix: something is left).

    Examples:
      gpuctl doctor
      gpuctl doctor --nodegroup gpu -o json
      gpuctl doctor --fix --grace 60
      gpuctl doctor --fix --taint-effect NoExecute
    """
    opts = settings(ctx)
    findings = api.doctor(nodegroup, node, fix, timeout, opts.target, grace, taint_effect)
    rows = [f.as_dict() for f in findings]
    if not rows and is_table(opts.output):
        info("doctor: nothing wrong found")
        return
    emit(rows, opts.output, COLUMNS, WIDE, fit="cause")
    if rows and opts.output == "table":
        section("\n".join(f"{r['object']}: {r['repair']}" for r in rows))
    if findings:
        first = findings[0]
        raise ValidationFailed(f"{len(findings)} {'finding' if len(findings) == 1 else 'findings'}: "
                               f"{first.check} on {first.object}: {first.cause}",
                               f"repair: {first.repair}")
