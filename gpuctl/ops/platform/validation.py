"""The validate/<group> steps: the CUDA smoke test (ops.validate) on each node group, where the run changed
something or this spec was not validated on the cluster since its last change (ops.validation_record)."""

from __future__ import annotations

from functools import partial

from gpuctl.model.change import Change, Observed, Step
from gpuctl.ops.platform.run import Cluster, Run
from gpuctl.ops.validate import validate_cluster
from gpuctl.util.errors import ValidationFailed


def validation_step(group: str, cluster: Cluster, run: Run) -> Step:
    return Step(f"validate/{group}", partial(_observe_validation, group, cluster, run),
                partial(_validate, group, cluster, run), check=True)


def _must_validate(cluster: Cluster, run: Run) -> bool:
    """The smoke test proves a change, or a platform not validated since its last one (a killed run); a
    converged, validated cluster is left alone (`gpuctl validate` re-checks it)."""
    return run.changed or not cluster.validated


def _observe_validation(group: str, cluster: Cluster, run: Run) -> Observed:
    if not _must_validate(cluster, run):
        return Observed(Change.NO_CHANGE, "validated already: skipped")
    how = " through a ResourceClaim" if cluster.spec.stack.by_dra(group) else ""
    return Observed(Change.CHECK, f"runs the CUDA smoke test{how} on node group {group}")


def _validate(group: str, cluster: Cluster, run: Run) -> Change:
    if not _must_validate(cluster, run):
        return Change.NO_CHANGE
    new = validate_cluster(cluster.client, group, cluster.spec.smoke_image)
    run.checks.extend(c for c in new if c not in run.checks)  # wait-capacity's check is listed once
    failed = [c for c in new if not c.ok]
    if failed:
        raise ValidationFailed(f"validation failed: {failed[0].name}: {failed[0].detail}")
    return Change.PASSED
