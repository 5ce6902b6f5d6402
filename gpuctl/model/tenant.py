"""A team on the shared GPU pool: its name, GPU quota, identity group and Kueue settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuctl.model import labels as L
from gpuctl.model.catalog import MIG_PROFILES
from gpuctl.model.dra import GPU_CLASS, MIG_CLASS, quota_key
from gpuctl.model.mig import resource_name
from gpuctl.model.naming import check_count, check_name, check_text
from gpuctl.util.errors import UsageError, shown

DEFAULT_COHORT = "gpuctl"  # the Kueue cohort tenants share unless told otherwise
TENANT_LABEL = "gpuctl.dev/tenant"
_PROFILE = re.compile(r"[1-9][0-9]?g\.[1-9][0-9]{0,3}gb(\+me)?")
MAX_QUOTA = 100_000  # GPUs or MIG instances per team: far above any cluster, far below overflow
# Namespaces a tenant may never be, even with --adopt: the cluster's own and the GPU stack's.
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "gpu-operator",
                                 "kueue-system", "karpenter"})
RESERVED_PREFIXES = ("kube-", "openshift-", "gpuctl-")


@dataclass(frozen=True)
class Tenant:
    name: str
    gpus: int
    mig: dict[str, int] = field(default_factory=dict)  # profile -> instances
    group: str | None = None
    adopt: bool = False  # may take over an existing namespace gpuctl did not create
    borrow: int = 0  # Kueue: what the team may borrow from its cohort, per resource and flavor
    lend: int | None = None  # Kueue: how much of its idle quota others may borrow; None: all of it
    cohort: str = DEFAULT_COHORT

    def hard(self, dra: bool = False) -> dict[str, str]:
        """The namespace's ResourceQuota: the most the team may ever use, its quota plus what it may borrow;
        in DRA mode also the devices its ResourceClaims may hold, per device class (MIG: all profiles)."""
        # A quota limits only the resources it names: every MIG profile the team is not given is named with 0,
        # else the team could take any number of instances of it.
        quota = {f"requests.{resource_name(p)}": "0" for p in MIG_PROFILES}
        quota[f"requests.{L.GPU_RESOURCE}"] = str(self.gpus + self.borrow)
        quota.update({f"requests.{resource_name(p)}": str(n + self.borrow) for p, n in sorted(self.mig.items())})
        if dra:
            quota[quota_key(GPU_CLASS)] = str(self.gpus + self.borrow)
            quota[quota_key(MIG_CLASS)] = str(sum(self.mig.values()) + self.borrow)
        return dict(sorted(quota.items()))


def check_tenant_name(name: str, field: str) -> str:
    """A tenant name is a namespace name that is not the cluster's or the GPU stack's."""
    check_name(name, field)
    if name in RESERVED_NAMESPACES or name.startswith(RESERVED_PREFIXES):
        raise UsageError(field, f"{name!r} is a system namespace, not a team's",
                         "choose another name; teams get a namespace of their own")
    return name


def make_tenant(name: str, gpus: int, mig: dict[str, int], group: str | None, adopt: bool, path: str,
                borrow: int = 0, lend: int | None = None, cohort: str = DEFAULT_COHORT) -> Tenant:
    """A checked Tenant; errors name `path`.name, .gpus, .mig, .group, .borrow, .lend and .cohort (a flag's
    name through flags.py)."""
    check_tenant_name(name, f"{path}.name")
    check_count(gpus, f"{path}.gpus", minimum=0, maximum=MAX_QUOTA)
    check_count(borrow, f"{path}.borrow", minimum=0, maximum=MAX_QUOTA)
    if lend is not None:
        check_count(lend, f"{path}.lend", minimum=0, maximum=MAX_QUOTA)
    check_name(cohort, f"{path}.cohort")
    for profile, count in mig.items():
        if not _PROFILE.fullmatch(profile):
            raise UsageError(f"{path}.mig", f"{shown(profile)} is not a MIG profile", "write e.g. 3g.20gb: 2")
        check_count(count, f"{path}.mig", maximum=MAX_QUOTA)
    if group is not None:
        check_text(group, f"{path}.group", maximum=253)
        if group.startswith("system:"):
            raise UsageError(f"{path}.group", f"{shown(group)} is a Kubernetes system group",
                             "bind the team's own identity group")
    return Tenant(name, gpus, dict(mig), group, adopt, borrow, lend, cohort)
