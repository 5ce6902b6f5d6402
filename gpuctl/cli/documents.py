"""One front door: a command line builds the same GpuCluster document a spec file holds, and goes
through the same parse, defaulting and validation passes (gpuctl.model.specfile). Each builder also
returns which flag each field came from, so an error names the flag, not the field path.

Only what a document cannot say is checked here: combinations of flags (`--sharing` with `--slices`).
"""

from __future__ import annotations

from typing import Any

from gpuctl.model.cloud_options import FLAGS as PROVIDER_FLAGS
from gpuctl.model.cloud_options import SPEC_KEYS
from gpuctl.model.naming import parse_count
from gpuctl.model.sharing import SECTIONS, STRATEGY
from gpuctl.model.spec import UNSTATED
from gpuctl.util.errors import UsageError, shown

Flags = dict[str, str]  # field path -> flag
GROUP = "spec.nodeGroups[0]"
# spec.provider keys by CloudOptions attribute (cloud_options.SPEC_KEYS the other way round): not from
# model.specfile, which loads PyYAML, so that `cluster create --help` and `nodegroup add --help` do not
_PROVIDER_KEYS = {attr: key for key, attr in SPEC_KEYS.items()}
_GROUP_FLAGS = {"name": "--name", "gpu": "--gpu", "nodes": "--nodes", "gpusPerNode": "--gpus-per-node",
                "minNodes": "--min-nodes", "maxNodes": "--max-nodes", "flavor": "--flavor",
                "instanceType": "--instance-type", "taints": "--taint", "sharing": "--slices",
                "sharing.mig": "--mig-layout", "labels": "--label"}


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """Drop flags left unset, so the document's defaults apply exactly as for a spec file."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items() if v not in (None, [], ())}


def labels_document(items: list[str] | None) -> dict[str, str] | None:
    """`--label KEY=VALUE` (repeatable) as a node group's `labels:` mapping (keys and values are judged by the
    document's validation, as a spec file's are)."""
    labels: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError("--label", f"{shown(item)} is not KEY=VALUE", "write e.g. --label team=ml")
        if key in labels:
            raise UsageError("--label", f"label {shown(key)} given twice", "give each label once")
        labels[key] = value
    return labels or None


def unstated(given: dict[str, Any]) -> frozenset[str]:
    """What a command line left unsaid (gpuctl.model.spec.UNSTATED): `given` holds, for each such field, the
    values of the flags that state it (None or empty where not given). A recorded node group keeps those."""
    def said(value: Any) -> bool:
        return any(map(said, value)) if isinstance(value, tuple) else value not in (None, [], ())

    return frozenset(field for field in UNSTATED if not said(given.get(field)))


def sharing_document(slices: int | None, strategy: str | None,
                     mig_layout: str | None = None) -> dict[str, Any] | None:
    """`--slices N [--sharing time-slicing|mps|none]` or `--mig-layout LAYOUT` as a node group's `sharing:`
    section (None: no sharing)."""
    if mig_layout is not None:
        if slices is not None or strategy is not None:
            raise UsageError("--mig-layout", "a node group's GPUs are either MIG-partitioned or shared whole",
                             "drop --slices/--sharing, or --mig-layout")
        return {"mig": {"layout": mig_layout}}
    chosen = STRATEGY.check(strategy, "--sharing") if strategy is not None else (  # '' is judged
        "time-slicing" if slices is not None else "none")
    if chosen == "none":
        if slices not in (None, 1):
            raise UsageError("--slices", f"{slices} slices need a sharing strategy", "drop --sharing none or --slices")
        return None
    if slices is None:
        raise UsageError("--slices", f"--sharing {chosen} needs the number of slices", "pass --slices N (N >= 2)")
    return {SECTIONS[chosen]: {"replicas": slices}}


def cluster_document(name: str, cloud: str, group: dict[str, Any], provider: dict[str, Any],
                     operator: dict[str, Any], karpenter: bool, group_name_flag: str = "--nodegroup-name",
                     name_flag: str = "--name", kueue: bool = False, dra: bool = False,
                     dra_alpha_sharing: bool = False) -> tuple[dict[str, Any], Flags]:
    """A one-node-group GpuCluster document from flags, and the flag of each field.

    `group` uses the document's keys (name, gpu, nodes, gpusPerNode, ..., taints, sharing);
    `provider` uses CloudOptions attributes; `operator` the spec.gpuOperator keys."""
    doc = {
        "apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": name},
        "spec": {
            "provider": {"cloud": cloud, **{_PROVIDER_KEYS[k]: v for k, v in _given(provider).items()
                                            if v is not False}},
            "nodeGroups": [_given(group)],
            "gpuOperator": _given(operator),
            **({"karpenter": {"enabled": True}} if karpenter else {}),
            **({"kueue": {"enabled": True}} if kueue else {}),
            **({"dra": {"enabled": dra, **({"alphaSharing": True} if dra_alpha_sharing else {})}}
               if dra or dra_alpha_sharing else {}),
        },
    }
    flags: Flags = {"metadata.name": name_flag, "spec.provider.cloud": "--cloud", "spec.karpenter": "--karpenter",
                    "spec.kueue": "--kueue", "spec.dra": "--dra", "spec.dra.alphaSharing": "--dra-alpha-sharing",
                    **{f"spec.provider.{key}": PROVIDER_FLAGS[attr] for attr, key in _PROVIDER_KEYS.items()},
                    **{f"spec.gpuOperator.{key}": f"--{flag}" for key, flag in (
                        ("charts", "charts"), ("nfd", "nfd"), ("migStrategy", "mig-strategy"),
                        ("smokeImage", "smoke-image"), ("validate", "validate"))},
                    **{f"{GROUP}.{key}": flag for key, flag in _GROUP_FLAGS.items()}}
    flags[f"{GROUP}.name"] = group_name_flag
    return doc, flags


def tenant_document(name: str, gpus: int | None, mig: list[str] | None, group: str | None, adopt: bool,
                    borrow: int | None = None, lend: str | None = None,
                    cohort: str | None = None) -> tuple[dict[str, Any], Flags]:
    """The `spec.tenants[]` fields the `gpuctl tenant add` flags name (`--mig PROFILE=COUNT` as a mapping);
    a flag left out is absent, one that clears its field is None: `--mig none`, `--group none`, `--lend all`
    (the update rule: gpuctl.model.tenant.merged_entry). An empty value is judged as any other (refused): an
    unset shell variable must not clear a field."""
    doc: dict[str, Any] = {"name": name}
    if mig == ["none"]:
        doc["mig"] = None
    elif mig:
        profiles: dict[str, Any] = {}
        for item in mig:
            profile, sep, number = item.partition("=")
            if not sep:
                raise UsageError("--mig", f"{shown(item)} is not PROFILE=COUNT",
                                 "write e.g. --mig 3g.20gb=2 (--mig none: no MIG quota)")
            if profile in profiles:
                raise UsageError("--mig", f"profile {shown(profile)} given twice", "give each profile once")
            profiles[profile] = parse_count(number, "--mig")
        doc["mig"] = profiles
    if lend is not None:
        doc["lend"] = None if lend == "all" else parse_count(lend, "--lend")
    for key, value in (("gpus", gpus), ("borrow", borrow), ("cohort", cohort)):
        if value is not None:
            doc[key] = value
    if group is not None:
        doc["group"] = None if group == "none" else group
    if adopt:
        doc["adopt"] = True
    return doc, {"tenant.name": "NAME", "tenant.gpus": "--gpus", "tenant.mig": "--mig", "tenant.group": "--group",
                 "tenant.adopt": "--adopt", "tenant.borrow": "--borrow", "tenant.lend": "--lend",
                 "tenant.cohort": "--cohort"}
