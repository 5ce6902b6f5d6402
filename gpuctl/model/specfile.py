"""The declarative input: `kind: GpuCluster` files, read strictly, defaulted, then validated.

Three passes, as eksctl does: `parse` reads the YAML strictly (unknown keys are errors with the
field path and a did-you-mean; a value from a fixed set, the GPU, cloud, nfd and migStrategy, is read in
any case and written in its one spelling, gpuctl.util.choices), `apply_defaults` fills what was left
out, `validate` checks every value against the catalog, label syntax, taint effects and each GPU's MIG
geometry. All three are pure: nothing here talks to a cloud or a cluster.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpuctl.model.capabilities import CapabilitiesOf
from gpuctl.model.catalog import GPU, GPUS, GpuModel
from gpuctl.model.charts import DRA_DRIVER, GPU_OPERATOR, KUEUE, NFD, UPSTREAM, chart_ref
from gpuctl.model.cloud_options import CLOUD, CLOUDS, OPTIONS, SPEC_KEYS, CloudOptions, unused_options
from gpuctl.model.dra import ALPHA_SHARING_GATES, check_dra_kubernetes
from gpuctl.model.mig import MigLayout, parse_layout
from gpuctl.model.naming import MAX_NODES, Huge, check_count, check_label_key, check_label_value, check_name, check_text
from gpuctl.model.sharing import MAX_REPLICAS, NO_SHARING, SECTIONS, STRATEGY_OF_SECTION, Sharing, check_sharing_fits
from gpuctl.model.spec import MAX_GPUS_PER_NODE, SMOKE_IMAGE, GroupPlan, NodeGroupSpec, PlatformSpec, all_taints
from gpuctl.model.stack_spec import MIG_STRATEGY, NFD_OWNER, GroupSharing, StackSpec, choose_mig_strategy
from gpuctl.model.strict_yaml import read_yaml
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint, parse_taints
from gpuctl.model.tenant import DEFAULT_COHORT, Tenant, make_tenant
from gpuctl.util.errors import SHOWN_PREFIX, UsageError, shown

API_VERSION = "gpuctl.dev/v1alpha1"
KIND = "GpuCluster"
_KIND_NAMES = {int: "an integer", str: "a string", bool: "a boolean"}


@dataclass(frozen=True)
class NodeGroupDoc:
    name: str
    gpu: str
    nodes: int
    min_nodes: int | None = None
    max_nodes: int | None = None
    gpus_per_node: int | None = None
    sharing: Sharing = NO_SHARING
    mig_layout: str | None = None
    taints: tuple[str, ...] | None = None  # None: the default GPU taint
    labels: dict[str, str] = field(default_factory=dict)
    flavor: str | None = None
    instance_type: str | None = None
    dra: bool = False  # DRA serves this group (the cluster's others keep the device plugin); apply moves it


@dataclass(frozen=True)
class GpuClusterDoc:
    name: str
    cloud: str
    options: CloudOptions
    node_groups: tuple[NodeGroupDoc, ...]
    charts: str | None = None
    nfd: str = "standalone"
    mig_strategy: str | None = None  # None: chosen from the node groups (choose_mig_strategy)
    smoke_image: str = SMOKE_IMAGE
    validate: bool = True
    karpenter: bool = False
    kueue: bool = False  # install Kueue (tenants' queues)
    tenants: tuple[Tenant, ...] = ()
    dra: bool = False  # GPUs by ResourceClaim through NVIDIA's DRA driver, not the device plugin
    dra_alpha_sharing: bool = False  # time-slicing and MPS through DRA: the driver's alpha gates


@dataclass(frozen=True)
class ValidGroup:
    """A node group after validation: catalog model, taints and MIG layout resolved."""

    doc: NodeGroupDoc
    gpu: GpuModel
    gpus_per_node: int
    taints: tuple[Taint, ...]
    mig: MigLayout | None


# -- pass 1: strict reading ---------------------------------------------------------------


def _mapping(value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(path or "(document)", f"must be a mapping, got {type(value).__name__}",
                         f"write the keys {', '.join(allowed)}")
    for key in value:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]}?" if close else f"use one of: {', '.join(allowed)}"
            raise UsageError(where, "unknown key", hint)
    for key in required:
        if value.get(key) is None:
            raise UsageError(f"{path}.{key}" if path else key, "is required", "add it")
    return value


def _typed(value: Any, path: str, kind: type, example: str) -> Any:
    if value is None:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        got = "int" if isinstance(value, Huge) else type(value).__name__
        text = repr(value)
        if len(text) > SHOWN_PREFIX:
            text = f"{text[:SHOWN_PREFIX]}... ({len(text)} characters)"
        raise UsageError(path, f"must be {_KIND_NAMES[kind]}, got {got} {text}", f"e.g. {example}")
    return value


def _given(value: Any, default: Any) -> Any:
    """`value`, or `default` where it was left out: an empty string is a value (and judged), not absence."""
    return default if value is None else value


def _str_list(value: Any, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise UsageError(path, f"must be a list, got {type(value).__name__}", "write a YAML list")
    return tuple(_typed(v, f"{path}[{i}]", str, "nvidia.com/gpu=true:NoSchedule") for i, v in enumerate(value))


def _str_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(path, f"must be a mapping, got {type(value).__name__}", "write key: value pairs")
    for key, item in value.items():
        _typed(item, f"{path}.{key}", str, '"a"  (quote numbers and booleans)')
    return {str(k): v for k, v in value.items()}


def _sharing(value: Any, path: str) -> tuple[Sharing, str | None]:
    if value is None:
        return NO_SHARING, None
    keys = (*SECTIONS.values(), "mig")
    doc = _mapping(value, path, keys)
    if len(doc) != 1:
        raise UsageError(path, f"set exactly one of {', '.join(keys)} (got {len(doc)})", "choose one strategy")
    (kind, body), = doc.items()
    where = f"{path}.{kind}"
    if kind == "mig":
        mig = _mapping(body, where, ("layout",), ("layout",))
        return NO_SHARING, _typed(mig["layout"], f"{where}.layout", str, "3g.20gb-2x2g.10gb")
    replicas = _mapping(body, where, ("replicas",), ("replicas",))["replicas"]
    _typed(replicas, f"{where}.replicas", int, "4")
    if not 2 <= replicas <= MAX_REPLICAS:
        raise UsageError(f"{where}.replicas", f"must be between 2 and {MAX_REPLICAS}, got {replicas}", "e.g. 4")
    return Sharing(STRATEGY_OF_SECTION[kind], replicas), None


def _node_group(value: Any, path: str) -> NodeGroupDoc:
    doc = _mapping(value, path, ("name", "gpu", "nodes", "minNodes", "maxNodes", "gpusPerNode", "sharing", "taints",
                                 "labels", "flavor", "instanceType", "dra"), ("name", "gpu", "nodes"))
    sharing, mig = _sharing(doc.get("sharing"), f"{path}.sharing")
    return NodeGroupDoc(
        name=_typed(doc["name"], f"{path}.name", str, "inference"),
        gpu=GPU.canonical(_typed(doc["gpu"], f"{path}.gpu", str, "t4")),
        nodes=_typed(doc["nodes"], f"{path}.nodes", int, "2"),
        min_nodes=_typed(doc.get("minNodes"), f"{path}.minNodes", int, "1"),
        max_nodes=_typed(doc.get("maxNodes"), f"{path}.maxNodes", int, "4"),
        gpus_per_node=_typed(doc.get("gpusPerNode"), f"{path}.gpusPerNode", int, "1"),
        sharing=sharing,
        mig_layout=mig,
        taints=_str_list(doc.get("taints"), f"{path}.taints"),
        labels=_str_map(doc.get("labels"), f"{path}.labels"),
        flavor=_typed(doc.get("flavor"), f"{path}.flavor", str, "g2.5xlarge"),
        instance_type=_typed(doc.get("instanceType"), f"{path}.instanceType", str, "g4dn.xlarge"),
        dra=bool(_typed(doc.get("dra"), f"{path}.dra", bool, "true")),
    )


PROVIDER_KEYS = {"cloud": "cloud", **SPEC_KEYS}  # spec.provider key -> CloudOptions field (cloud_options.OPTIONS)


def parse(doc: Any) -> GpuClusterDoc:
    """Read a GpuCluster document strictly; no defaults beyond the dataclasses', no catalog checks."""
    top = _mapping(doc, "", ("apiVersion", "kind", "metadata", "spec"), ("apiVersion", "kind", "metadata", "spec"))
    if top["apiVersion"] != API_VERSION:
        raise UsageError("apiVersion", f"unsupported {shown(top['apiVersion'])}", f"use {API_VERSION}")
    if top["kind"] != KIND:
        raise UsageError("kind", f"unsupported {shown(top['kind'])}", f"use {KIND}")
    name = _typed(_mapping(top["metadata"], "metadata", ("name",), ("name",))["name"], "metadata.name", str, "demo")
    spec = _mapping(top["spec"], "spec",
                    ("provider", "nodeGroups", "gpuOperator", "karpenter", "kueue", "dra", "tenants"),
                    ("provider", "nodeGroups"))
    provider = _mapping(spec["provider"], "spec.provider", tuple(PROVIDER_KEYS), ("cloud",))
    options: dict[str, Any] = {}
    for key, attr in PROVIDER_KEYS.items():
        if key == "subnets":
            subnets = _str_list(provider.get(key), f"spec.provider.{key}")
            if subnets:
                options["subnets"] = subnets
        elif key in ("execAuth", "noNodeRepair"):
            options[attr] = bool(_typed(provider.get(key), f"spec.provider.{key}", bool, "true"))
        elif key != "cloud" and provider.get(key) is not None:
            options[attr] = _typed(provider[key], f"spec.provider.{key}", str, "a name")
    groups = spec["nodeGroups"]
    if not isinstance(groups, list) or not groups:
        raise UsageError("spec.nodeGroups", "must be a non-empty list", "add at least one GPU node group")
    operator = _mapping(spec.get("gpuOperator") or {}, "spec.gpuOperator",
                        ("charts", "nfd", "migStrategy", "smokeImage", "validate"))
    karpenter = _mapping(spec.get("karpenter") or {}, "spec.karpenter", ("enabled",))
    kueue = _mapping(spec.get("kueue") or {}, "spec.kueue", ("enabled",))
    dra = _mapping(spec.get("dra") or {}, "spec.dra", ("enabled", "alphaSharing"))
    tenants = spec.get("tenants") or []
    if not isinstance(tenants, list):
        raise UsageError("spec.tenants", "must be a list", "write one entry per team")
    return GpuClusterDoc(
        name=name,
        cloud=CLOUD.canonical(_typed(provider["cloud"], "spec.provider.cloud", str, "sim")),
        options=CloudOptions(**options),
        node_groups=tuple(_node_group(g, f"spec.nodeGroups[{i}]") for i, g in enumerate(groups)),
        charts=_typed(operator.get("charts"), "spec.gpuOperator.charts", str, "upstream"),
        nfd=NFD_OWNER.canonical(_given(_typed(operator.get("nfd"), "spec.gpuOperator.nfd", str, "standalone"),
                                       "standalone")),
        mig_strategy=MIG_STRATEGY.canonical(_typed(operator.get("migStrategy"), "spec.gpuOperator.migStrategy", str,
                                                   "mixed")),
        smoke_image=_given(_typed(operator.get("smokeImage"), "spec.gpuOperator.smokeImage", str, SMOKE_IMAGE),
                           SMOKE_IMAGE),
        validate=True if operator.get("validate") is None else _typed(operator["validate"],
                                                                      "spec.gpuOperator.validate", bool, "true"),
        karpenter=bool(_typed(karpenter.get("enabled"), "spec.karpenter.enabled", bool, "true")),
        kueue=bool(_typed(kueue.get("enabled"), "spec.kueue.enabled", bool, "true")),
        dra=bool(_typed(dra.get("enabled"), "spec.dra.enabled", bool, "true")),
        dra_alpha_sharing=bool(_typed(dra.get("alphaSharing"), "spec.dra.alphaSharing", bool, "true")),
        tenants=tuple(_tenant(t, f"spec.tenants[{i}]") for i, t in enumerate(tenants)),
    )


def _tenant(value: Any, path: str) -> Tenant:
    doc = _mapping(value, path, ("name", "gpus", "mig", "group", "adopt", "borrow", "lend", "cohort"), ("name",))
    mig = doc.get("mig") or {}
    if not isinstance(mig, dict):
        raise UsageError(f"{path}.mig", "must be a mapping of profile: count", "e.g. mig: {3g.20gb: 2}")
    for profile, count in mig.items():
        _typed(profile, f"{path}.mig", str, "3g.20gb")
        _typed(count, f"{path}.mig.{profile}", int, "2")
    return make_tenant(_typed(doc["name"], f"{path}.name", str, "team-a"),
                       _typed(doc.get("gpus"), f"{path}.gpus", int, "4") or 0, mig,
                       _typed(doc.get("group"), f"{path}.group", str, "team-a-devs"),
                       bool(_typed(doc.get("adopt"), f"{path}.adopt", bool, "true")), path,
                       _typed(doc.get("borrow"), f"{path}.borrow", int, "2") or 0,
                       _typed(doc.get("lend"), f"{path}.lend", int, "2"),
                       _given(_typed(doc.get("cohort"), f"{path}.cohort", str, "gpu-pool"), DEFAULT_COHORT))


# -- pass 2: defaults -----------------------------------------------------------------------


def apply_defaults(doc: GpuClusterDoc, capabilities: CapabilitiesOf) -> GpuClusterDoc:
    """Fill what the file left out from the catalog (GPUs per node) and the cloud's provider (chart source)."""
    groups = []
    for group in doc.node_groups:
        model = GPUS.get(group.gpu)
        per_node = group.gpus_per_node if group.gpus_per_node is not None else (
            model.default_gpus_per_node if model else None)
        groups.append(replace(group, gpus_per_node=per_node,
                              taints=group.taints if group.taints is not None else tuple(map(str, DEFAULT_GPU_TAINTS))))
    charts = _given(doc.charts, capabilities(doc.cloud).default_charts if doc.cloud in CLOUDS else "upstream")
    return replace(doc, node_groups=tuple(groups), charts=charts)


# -- pass 3: validation ---------------------------------------------------------------------


def validate(doc: GpuClusterDoc, capabilities: CapabilitiesOf) -> list[ValidGroup]:
    """Every value against the catalog, label syntax, taint effects, MIG geometry and what the cloud's
    provider offers."""
    check_name(doc.name, "metadata.name")
    CLOUD.check(doc.cloud, "spec.provider.cloud")
    offers = capabilities(doc.cloud)
    unused = unused_options(doc.cloud, doc.options)
    for attr, value in vars(doc.options).items():
        key = OPTIONS[attr].key or attr
        if attr in unused:
            raise UsageError(f"spec.provider.{key}", f"not used by cloud {doc.cloud}", "drop it")
        for i, text in enumerate(value if isinstance(value, tuple) else (value,)):
            if isinstance(text, str):
                check_text(text, f"spec.provider.{key}" + (f"[{i}]" if isinstance(value, tuple) else ""), 255)
    check_text(doc.smoke_image, "spec.gpuOperator.smokeImage")
    chart_ref(GPU_OPERATOR, _given(doc.charts, "upstream"), "spec.gpuOperator.charts")
    chart_ref(NFD, _given(doc.charts, "upstream"), "spec.gpuOperator.charts")
    NFD_OWNER.check(doc.nfd, "spec.gpuOperator.nfd")
    if offers.kueue_chart(doc.kueue):
        if _given(doc.charts, "upstream") == "bundled":
            raise UsageError("spec.kueue.enabled", "there is no bundled Kueue chart (the sim runs Kueue itself)",
                             "use charts upstream, a directory holding kueue/, or an oci:// mirror")
        chart_ref(KUEUE, _given(doc.charts, "upstream"), "spec.gpuOperator.charts")
    if doc.dra:
        chart_ref(DRA_DRIVER, _given(doc.charts, "upstream"), "spec.gpuOperator.charts")
        check_dra_kubernetes(doc.options.kubernetes_version, "spec.provider.kubernetesVersion")
    elif doc.dra_alpha_sharing and not any(g.dra for g in doc.node_groups):
        raise UsageError("spec.dra.alphaSharing", "only in DRA mode",
                         "turn DRA mode on (--dra, spec.dra.enabled: true, or a node group's dra: true), "
                         "or drop it")
    if doc.karpenter and not offers.karpenter:
        raise UsageError("spec.karpenter.enabled", f"Karpenter pools need cloud {_offering(capabilities, 'karpenter')}"
                         f", not {doc.cloud}", "drop it")
    seen: set[str] = set()
    valid = [_validate_group(doc, g, f"spec.nodeGroups[{i}]", seen, capabilities)
             for i, g in enumerate(doc.node_groups)]
    mig_strategy(doc, valid)
    names = [t.name for t in doc.tenants]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise UsageError(f"spec.tenants[{i}].name", f"duplicate tenant {name!r}", "give each team one entry")
    return valid


def mig_strategy(doc: GpuClusterDoc, groups: list[ValidGroup]) -> str:
    """The operator's MIG strategy for these node groups (one rule: choose_mig_strategy)."""
    return choose_mig_strategy(doc.mig_strategy, [
        GroupSharing(g.doc.name, g.doc.sharing.strategy, g.mig.profiles if g.mig else ()) for g in groups],
        "spec.gpuOperator.migStrategy")


def _validate_group(doc: GpuClusterDoc, group: NodeGroupDoc, path: str, seen: set[str],
                    capabilities: CapabilitiesOf) -> ValidGroup:
    offers = capabilities(doc.cloud)
    check_name(group.name, f"{path}.name")
    if group.name in seen:
        raise UsageError(f"{path}.name", f"duplicate node group {group.name!r}", "give each node group its own name")
    seen.add(group.name)
    model = GPUS[GPU.check(group.gpu, f"{path}.gpu")]
    if group.nodes == 0 and not doc.karpenter:
        raise UsageError(f"{path}.nodes", "must be at least 1, got 0 (0 is for node groups Karpenter launches)",
                         "pass nodes 1 or more, or turn Karpenter on (--karpenter)")
    check_count(group.nodes, f"{path}.nodes", minimum=0 if doc.karpenter else 1)
    if group.nodes == 0 and (group.max_nodes or 0) < 1:  # Karpenter launches them, up to maxNodes
        raise UsageError(f"{path}.maxNodes", "a node group of 0 nodes needs maxNodes of at least 1 for "
                         "Karpenter to launch", "set maxNodes (--max-nodes)")
    per_node = model.default_gpus_per_node if group.gpus_per_node is None else group.gpus_per_node
    check_count(per_node, f"{path}.gpusPerNode", maximum=MAX_GPUS_PER_NODE)
    if group.min_nodes is not None and not 0 <= group.min_nodes <= group.nodes:
        raise UsageError(f"{path}.minNodes", f"must be between 0 and nodes ({group.nodes}), got {group.min_nodes}",
                         "lower minNodes or raise nodes")
    if group.max_nodes is not None and group.max_nodes < group.nodes:
        raise UsageError(f"{path}.maxNodes", f"must be at least nodes ({group.nodes}), got {group.max_nodes}",
                         "raise maxNodes")
    if group.max_nodes is not None:
        check_count(group.max_nodes, f"{path}.maxNodes", maximum=MAX_NODES)
    for key, value in (("flavor", group.flavor), ("instanceType", group.instance_type)):
        if value is not None:
            check_text(value, f"{path}.{key}", maximum=255)
    if group.flavor and not offers.flavor:
        raise UsageError(f"{path}.flavor", f"only for cloud {_offering(capabilities, 'flavor')}, not {doc.cloud}",
                         f"use instanceType on {_offering(capabilities, 'instance_type')}")
    if group.instance_type and not offers.instance_type:
        raise UsageError(f"{path}.instanceType", f"only for cloud {_offering(capabilities, 'instance_type')}, not "
                         f"{doc.cloud}", f"use flavor on {_offering(capabilities, 'flavor')}")
    for key, value in group.labels.items():
        check_label_key(key, f"{path}.labels")
        check_label_value(value, f"{path}.labels.{key}")
    taints = parse_taints(group.taints or (), f"{path}.taints")
    mig = parse_layout(group.mig_layout, model, f"{path}.sharing.mig.layout") if group.mig_layout is not None else None
    if group.sharing.config_key:
        kind = SECTIONS[group.sharing.strategy]
        check_sharing_fits(group.sharing, model, f"{path}.sharing.{kind}.replicas")
        if (doc.dra or group.dra) and not doc.dra_alpha_sharing:
            raise UsageError(f"{path}.sharing.{kind}", f"{group.sharing.strategy} through DRA is alpha in "
                             f"{DRA_DRIVER} {UPSTREAM[DRA_DRIVER][1]} (feature gate "
                             f"{ALPHA_SHARING_GATES[group.sharing.strategy]})",
                             "drop the sharing (MIG layouts are GA), or opt in with --dra-alpha-sharing "
                             "(spec.dra.alphaSharing: true)")
    if group.dra and not doc.dra:
        _check_dra_group(doc, path)
    return ValidGroup(group, model, per_node, taints, mig)


def _check_dra_group(doc: GpuClusterDoc, path: str) -> None:
    """A node group DRA serves while the others keep the device plugin: the driver's chart, resource.k8s.io/v1,
    and nodes gpuctl labels itself (Karpenter's nodes come and go unlabelled)."""
    chart_ref(DRA_DRIVER, _given(doc.charts, "upstream"), "spec.gpuOperator.charts")
    check_dra_kubernetes(doc.options.kubernetes_version, "spec.provider.kubernetesVersion")
    if doc.karpenter:
        raise UsageError(f"{path}.dra", "a node group moves to DRA alone only without Karpenter (the nodes it "
                         "launches would come up under the device plugin)",
                         "drop it, or turn DRA on for every group (spec.dra.enabled: true)")


def load_spec(path: Path, capabilities: CapabilitiesOf) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """Read (bounded and strict), default and validate a GpuCluster file; every error names its field.
    `capabilities`: what each cloud's provider offers (gpuctl.api.load_spec passes the providers' own)."""
    return load_document(read_yaml(path, "-f", long_numbers=True), capabilities)


def load_document(raw: Any, capabilities: CapabilitiesOf,
                  flags: Mapping[str, str] | None = None) -> tuple[GpuClusterDoc, list[ValidGroup]]:
    """Parse, default and validate a GpuCluster document. A command line's document comes with
    `flags`, field path -> flag: an error in a field that came from a flag then names the flag."""
    try:
        doc = apply_defaults(parse(raw), capabilities)
        return doc, validate(doc, capabilities)
    except UsageError as err:
        raise as_flag_error(err, flags or {}) from None


def load_tenant(raw: Any, flags: Mapping[str, str]) -> Tenant:
    """One `spec.tenants[]` entry given on a command line (field paths under `tenant`)."""
    try:
        return _tenant(raw, "tenant")
    except UsageError as err:
        raise as_flag_error(err, flags) from None


def as_flag_error(err: UsageError, flags: Mapping[str, str]) -> UsageError:
    """`err` with its field path replaced by the flag the value came from (longest matching path)."""
    matches = [path for path in flags if err.field == path or err.field.startswith((f"{path}.", f"{path}["))]
    if not matches:
        return err
    flag = flags[max(matches, key=len)]
    return UsageError(flag, err.message.removeprefix(f"{err.field}: "), err.hint and err.hint.replace(err.field, flag))


# -- to and from the internal model ---------------------------------------------------------


def _offering(capabilities: CapabilitiesOf, what: str) -> str:
    """The clouds whose providers offer `what` (a Capabilities field), for an error line."""
    return " or ".join(c for c in CLOUDS if getattr(capabilities(c), what))


def node_group_spec(group: ValidGroup) -> NodeGroupSpec:
    """The provider-facing model of a validated node group."""
    doc = group.doc
    return NodeGroupSpec(doc.name, group.gpu, doc.nodes, group.gpus_per_node, doc.min_nodes, doc.max_nodes,
                         doc.flavor, doc.instance_type, group.taints)


def to_platform(doc: GpuClusterDoc, groups: list[ValidGroup], ships_driver: bool) -> PlatformSpec:
    """The same PlatformSpec `gpuctl cluster create` builds from flags; `ships_driver`: the cloud's node image
    has the NVIDIA driver and toolkit (the provider says: gpuctl.api.to_platform)."""
    plans = tuple(GroupPlan(node_group_spec(g), g.doc.sharing, g.mig, dict(g.doc.labels)) for g in groups)
    stack = StackSpec(charts=_given(doc.charts, "upstream"), nfd=doc.nfd, driver=not ships_driver,
                      toolkit=not ships_driver, mig_strategy=mig_strategy(doc, groups), taints=all_taints(plans),
                      shares_gpus=any(g.doc.sharing.config_key for g in groups), dra=doc.dra,
                      dra_alpha_sharing=doc.dra_alpha_sharing,
                      dra_groups=() if doc.dra else tuple(g.doc.name for g in groups if g.doc.dra))
    options = replace(doc.options, karpenter=doc.karpenter)
    return PlatformSpec(doc.name, doc.cloud, plans, stack, smoke_image=doc.smoke_image, validate=doc.validate,
                        options=options, tenants=doc.tenants, kueue=doc.kueue)


def export_spec(spec: Any) -> str:
    """The GpuCluster YAML equivalent of a PlatformSpec (e.g. of a command line)."""
    provider: dict[str, Any] = {"cloud": spec.cloud}
    for key, attr in PROVIDER_KEYS.items():
        value = getattr(spec.options, attr, None) if attr != "cloud" else None
        if value:
            provider[key] = list(value) if isinstance(value, tuple) else value
    groups = []
    for plan in spec.groups:
        group: dict[str, Any] = {"name": plan.spec.name, "gpu": plan.spec.gpu.name, "nodes": plan.spec.nodes,
                                 "gpusPerNode": plan.spec.gpus_per_node}
        for key, value in (("minNodes", plan.spec.min_nodes), ("maxNodes", plan.spec.max_nodes),
                           ("flavor", plan.spec.flavor), ("instanceType", plan.spec.instance_type)):
            if value is not None:
                group[key] = value
        if plan.mig is not None:
            group["sharing"] = {"mig": {"layout": plan.mig.name}}
        elif plan.sharing.config_key:
            kind = SECTIONS[plan.sharing.strategy]
            group["sharing"] = {kind: {"replicas": plan.sharing.replicas}}
        group["taints"] = [str(t) for t in plan.spec.taints]
        if plan.labels:
            group["labels"] = dict(plan.labels)
        if plan.spec.name in spec.stack.dra_groups:
            group["dra"] = True
        groups.append(group)
    operator = {"charts": spec.stack.charts, "nfd": spec.stack.nfd, "migStrategy": spec.stack.mig_strategy,
                "smokeImage": spec.smoke_image, "validate": spec.validate}
    body: dict[str, Any] = {"provider": provider, "nodeGroups": groups, "gpuOperator": operator}
    if spec.options.karpenter:
        body["karpenter"] = {"enabled": True}
    if spec.kueue:
        body["kueue"] = {"enabled": True}
    if spec.stack.dra:
        body["dra"] = {"enabled": True, **({"alphaSharing": True} if spec.stack.dra_alpha_sharing else {})}
    if spec.tenants:
        body["tenants"] = [{"name": t.name, "gpus": t.gpus, **({"mig": dict(t.mig)} if t.mig else {}),
                            **({"group": t.group} if t.group else {}), **({"adopt": True} if t.adopt else {}),
                            **({"borrow": t.borrow} if t.borrow else {}),
                            **({"lend": t.lend} if t.lend is not None else {}),
                            **({"cohort": t.cohort} if t.cohort != DEFAULT_COHORT else {})}
                           for t in spec.tenants]
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": spec.name}, "spec": body}
    return yaml.safe_dump(doc, sort_keys=False)
