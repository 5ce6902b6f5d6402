"""What one apply or plan carries from step to step: Run (what the steps tell the later ones) and Cluster (the
cluster as the flow reads it once, between the cloud's steps and the cluster's: steps.read_cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Observed
from gpuctl.model.spec import PlatformSpec
from gpuctl.model.taints import Taint
from gpuctl.model.tenant import Tenant
from gpuctl.ops.smoke import Check
from gpuctl.stack.helm import HelmTarget
from gpuctl.stack.owners import StackPlan


@dataclass(frozen=True)
class Cluster:
    """What the cluster-side steps depend on, read once before the first of them (steps.read_cluster)."""

    spec: PlatformSpec  # with the cluster's other recorded node groups
    selectors: dict[str, str]  # node group -> the label selector of its nodes
    stack_plan: StackPlan
    dra_owner: str | None = None  # another's DRA driver, used as it is
    validated: bool = False  # this spec passed its smoke test here, and nothing was written since
    tenant: str | None = None  # a tenant namespace the cluster has (its GPU tolerations follow the node groups)
    client: Kube = None  # type: ignore[assignment]  # None where unreached: none of its steps then runs
    helm: HelmTarget = None  # type: ignore[assignment]
    absent: Observed | None = None  # not reached (plan only): what each change step says instead
    unqueued: tuple[str, ...] = ()  # with spec.kueue: tenants on the cluster without Kueue queues yet
    dra_groups_only: bool = False  # gpuctl's DRA driver serves only the groups marked dra: true (dra_groups.py)
    # tenants not in the spec whose quota is of the other DRA mode than the spec's (tenants.tenants_off_mode)
    off_mode: tuple[Tenant, ...] = ()
    # GPU taints gpuctl's operator tolerated before this run and does not now (dropped_taints)
    dropped: tuple[Taint, ...] = ()


@dataclass
class Run:
    """One apply or plan of a spec: what its steps tell the later ones."""

    kubeconfig: Path | None = None  # the file write-kubeconfig merges into (None: the default one)
    context: str | None = None  # the context it writes (plan: would), then reads through (None: the provider's name)
    checks: list[Check] = field(default_factory=list)
    changed: bool = False  # a step so far changed something (apply) or would (plan)
    exists: bool = True  # the cluster exists (set by observing ensure-cluster)
    written: Path | None = None  # where write-kubeconfig wrote, and the context it made current
    written_context: str | None = None
    joining: dict[str, int] = field(default_factory=dict)  # node group -> nodes ensure-nodegroup brings (observed)

    def note(self, change: Change) -> None:
        """A step's outcome (apply) or observed action (plan): whether to smoke-test depends on it."""
        if change not in (Change.NO_CHANGE, Change.PASSED, Change.CHECK):
            self.changed = True
