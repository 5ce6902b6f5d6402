"""A team on the shared GPU pool: its name, GPU quota, identity group and Kueue settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.catalog import MIG_PROFILES
from gpuctl.model.change import Change
from gpuctl.model.dra import GPU_CLASS, MIG_CLASS, mig_class, quota_key
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
        in DRA mode also the devices its ResourceClaims may hold, per device class.

        MIG in DRA mode: the devices of gpuctl's class of each profile it is given (`mig-3g.20gb.gpuctl.dev`),
        which its `mig-<profile>` templates claim from and which serves an unmodified pod's
        `nvidia.com/mig-<profile>` (KEP-5004): Kubernetes v1.37.2's quota charges the scheduler's claim for such
        a pod `<class>.deviceclass.resource.k8s.io/devices` as it charges a template's claim, and charges any
        claim of a class that names an extended resource `requests.<that resource>` too, less what its owning
        pod already counts (pkg/quota/v1/evaluator/core/resource_claims.go Usage, addExtendedResourceQuota;
        pods.go podComputeUsageHelper). So each of the two keys caps a profile however it is asked for, and
        the profiles the team is not given stay at `requests.nvidia.com/mig-<profile>: 0`. The driver's own
        mig.nvidia.com, which no template of gpuctl's names any more, is capped at 0: a claim of the team's
        own on it would bypass the per-profile quota."""
        # A quota limits only the resources it names: every MIG profile the team is not given is named with 0,
        # else the team could take any number of instances of it.
        quota = {f"requests.{resource_name(p)}": "0" for p in MIG_PROFILES}
        quota[f"requests.{L.GPU_RESOURCE}"] = str(self.gpus + self.borrow)
        quota.update({f"requests.{resource_name(p)}": str(n + self.borrow) for p, n in sorted(self.mig.items())})
        if dra:
            quota[quota_key(GPU_CLASS)] = str(self.gpus + self.borrow)
            quota[quota_key(MIG_CLASS)] = "0"
            quota.update({quota_key(mig_class(p)): str(n + self.borrow) for p, n in self.mig.items()})
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


# -- `tenant add` on an existing team: what the command names changes, the rest stays ---------------------------

MIG_QUOTA_PREFIX = "nvidia.com/mig-"


def profile_of(resource: str) -> str | None:
    """The MIG profile of a quota resource (`nvidia.com/mig-1g.5gb.me` -> `1g.5gb+me`, mig.resource_name's
    inverse); None for any other resource."""
    if not resource.startswith(MIG_QUOTA_PREFIX):
        return None
    profile = resource.removeprefix(MIG_QUOTA_PREFIX)
    return profile[:-3] + "+me" if profile.endswith("gb.me") else profile


def tenant_entry(tenant: Tenant) -> dict[str, Any]:
    """The `spec.tenants[]` entry that states `tenant` exactly (what specfile's parse turns back into it)."""
    entry: dict[str, Any] = {"name": tenant.name, "gpus": tenant.gpus, "mig": dict(sorted(tenant.mig.items())),
                             "group": tenant.group, "borrow": tenant.borrow, "lend": tenant.lend,
                             "cohort": tenant.cohort}
    if tenant.adopt:
        entry["adopt"] = True
    return entry


def merged_entry(current: Tenant | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """`tenant add`'s one rule for an existing team (as `kubectl label` and `helm upgrade --reuse-values`):
    the entry of `current` with the fields the command names in `given` replaced; a field given as None
    goes back to its default (--group none, --lend all, --mig none); `mig` merges per profile, and a profile
    given 0 is dropped. A new team (`current` None) starts from the defaults. A spec's entry never comes
    here: it states the whole tenant."""
    entry: dict[str, Any] = tenant_entry(current) if current is not None else {"name": given["name"]}
    for key, value in given.items():
        if key == "mig" and value is not None:
            value = {**(entry.get("mig") or {}), **value}
        entry[key] = value
    if entry.get("mig") is not None:
        entry["mig"] = {p: n for p, n in entry["mig"].items() if n != 0}
    return {k: v for k, v in entry.items() if v not in (None, {})}


def tenant_changes(before: Tenant | None, after: Tenant) -> list[str]:
    """One line per field that differs, `quota nvidia.com/gpu: 2 -> 4` (group `-`: none; lend `all`: the
    default); a new team (`before` None) is compared with the defaults."""
    def fields(t: Tenant) -> dict[str, str]:
        shown_fields = {f"quota {L.GPU_RESOURCE}": str(t.gpus)}
        shown_fields.update({f"quota {resource_name(p)}": str(n) for p, n in sorted(t.mig.items())})
        shown_fields.update({"group": t.group or "-", "borrow": str(t.borrow),
                             "lend": "all" if t.lend is None else str(t.lend), "cohort": t.cohort})
        return shown_fields

    old, new = fields(before or Tenant(after.name, 0)), fields(after)
    every = dict.fromkeys((*new, *old))  # a MIG profile only one side has is 0 on the other
    quotas = sorted((k for k in every if k.startswith("quota ")), key=lambda k: (k != f"quota {L.GPU_RESOURCE}", k))
    keys = [*quotas, *(k for k in every if not k.startswith("quota "))]
    return [f"{key}: {old.get(key, '0')} -> {new.get(key, '0')}" for key in keys
            if old.get(key, "0") != new.get(key, "0")]


@dataclass(frozen=True)
class TenantUpdate:
    """What `tenant add` did: the outcome, the tenant before (None: new) and after, one line per changed
    field (tenant_changes), and the quota the cluster now holds."""

    change: Change
    before: Tenant | None
    after: Tenant
    changes: tuple[str, ...]
    quota: dict[str, int]
