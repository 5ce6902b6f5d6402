"""MIG layouts: parse them, place them on the real slot geometry, and render them.

A layout is checked against the memory-slot geometry of gpuctl.model.catalog (see
shared/reference/gpu-facts.md), not against a sum of compute slices, so a layout that
passes here is one mig-parted can create. Pure functions: no I/O, no Kubernetes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS, GpuModel, MigGeometry, MigProfile
from gpuctl.model.naming import ASCII_COUNT
from gpuctl.model.stack_spec import MIG_STRATEGIES
from gpuctl.util.errors import UsageError, shown
from gpuctl.util.lazy_import import LazyImport

if TYPE_CHECKING:
    import hashlib

    import yaml
else:
    hashlib = LazyImport("hashlib")  # OpenSSL: only for the rare config name over the label limit
    yaml = LazyImport("yaml")  # `mig validate` and `mig plan` never load it

NAMED = ("all-disabled", "all-enabled", "all-balanced")  # plus all-<profile> for each profile
_LAYOUT = re.compile(r"[A-Za-z0-9.+-]{1,200}")  # ASCII only: whitespace, control characters and '٣' are refused
_SYNTAX_HINT = "write profiles joined by '-', e.g. 3g.20gb-2x2g.10gb, or a named config such as all-balanced"
_PLAN_HINT = "see 'gpuctl mig plan' for the slot map, or use all-balanced"
_LABEL_MAX = 63  # Kubernetes label value limit


@dataclass(frozen=True)
class MigLayout:
    name: str  # a named config ("all-balanced") or the normalised layout ("3g.20gb-2x2g.10gb")
    profiles: tuple[str, ...]  # one entry per instance, largest first
    enabled: bool  # False only for all-disabled


@dataclass(frozen=True)
class Placement:
    profile: str
    start: int  # first memory slot
    width: int
    compute: int


def _geometry(model: GpuModel, field: str) -> MigGeometry:
    if model.mig is None:
        raise UsageError(field, f"{model.name} does not support MIG", "use --slices N (time-slicing) or MPS instead")
    return model.mig


def _profile(geo: MigGeometry, name: str, model: GpuModel, field: str) -> MigProfile:
    profile = geo.profile(name)
    if profile is None:
        raise UsageError(field, f"unknown profile '{name}' for {model.name}",
                         f"use one of: {', '.join(p.name for p in geo.profiles)}")
    return profile


def _ordered(profiles: Iterable[MigProfile], geo: MigGeometry) -> list[MigProfile]:
    """Widest first, then most compute; catalog order breaks ties so the result is stable."""
    rank = {p.name: i for i, p in enumerate(geo.profiles)}
    return sorted(profiles, key=lambda p: (-p.width, -p.compute, rank[p.name]))


def _layout_text(names: Sequence[str]) -> str:
    groups = [(name, len(list(run))) for name, run in groupby(names)]
    return "-".join(name if count == 1 else f"{count}x{name}" for name, count in groups)


def _entries(text: str, field: str) -> list[tuple[str, int]]:
    """(profile, repeat count) of each '-'-joined entry of a custom layout, syntax checked."""
    entries = []
    for token in text.split("-"):
        # profile names never contain "x", so an "x" always marks a repeat count
        count_text, _, name = token.rpartition("x") if "x" in token else ("1", "", token)
        if not token or not name or not ASCII_COUNT.fullmatch(count_text):
            raise UsageError(field, f"malformed MIG layout entry {shown(token)}", _SYNTAX_HINT)
        if int(count_text) == 0:
            raise UsageError(field, f"repeat count 0 in '{token}'", _SYNTAX_HINT)
        entries.append((name, int(count_text)))
    return entries


def check_layout_text(text: str, field: str = "LAYOUT") -> str:
    """What a layout must be on any GPU: its syntax, and profiles that some MIG GPU of the catalog has.
    For `mig apply`, which learns the GPU models from the cluster: judged before the first request."""
    if not _LAYOUT.fullmatch(text):
        raise UsageError(field, f"{shown(text)} is not a MIG layout", _SYNTAX_HINT)
    name = text.lower()
    if name in NAMED:
        return text
    known = {p.name: None for m in GPUS.values() if m.mig for p in m.mig.profiles}
    for profile in [name.removeprefix("all-")] if name.startswith("all-") else [p for p, _ in _entries(name, field)]:
        if profile not in known:
            raise UsageError(field, f"unknown profile {shown(profile)} (no MIG GPU has it)",
                             f"use one of: {', '.join(known)}")
    return text


def _parse_custom(text: str, geo: MigGeometry, model: GpuModel, field: str) -> list[MigProfile]:
    counts: Counter[MigProfile] = Counter()
    for name, count in _entries(text, field):
        counts[_profile(geo, name, model, field)] += count
    _check_counts(counts, geo, model, field)  # before expanding, so "9999x1g.5gb" stays cheap
    return _ordered(counts.elements(), geo)


def _check_counts(counts: Counter[MigProfile], geo: MigGeometry, model: GpuModel, field: str) -> None:
    if sum(n for p, n in counts.items() if p.name.endswith("+me")) > 1:
        raise UsageError(field, "at most one +me instance per GPU",
                         "keep one +me profile and use plain profiles for the others")
    for profile in _ordered(counts, geo):
        if counts[profile] > profile.max_count:
            raise UsageError(field, f"at most {profile.max_count} x {profile.name} fit on one {model.name} GPU, "
                                    f"got {counts[profile]}", f"use all-{profile.name} for the most that fit")


def parse_layout(text: str, model: GpuModel, field: str = "LAYOUT") -> MigLayout:
    """Parse and validate a layout for one GPU of `model`; an invalid one raises UsageError."""
    geo = _geometry(model, field)
    if not _LAYOUT.fullmatch(text):
        raise UsageError(field, f"{shown(text)} is not a MIG layout", _SYNTAX_HINT)
    name = text.lower()
    if name in ("all-disabled", "all-enabled"):
        return MigLayout(name, (), name == "all-enabled")
    if name == "all-balanced":
        profiles = _ordered((_profile(geo, p, model, field) for p in geo.balanced), geo)
    elif name.startswith("all-"):
        one = _profile(geo, name.removeprefix("all-"), model, field)
        count = next(n for n in range(one.max_count, 0, -1)
                     if n * one.compute <= geo.compute_slices and _search([one] * n, geo)[1])
        profiles = [one] * count
    else:
        profiles = _parse_custom(name, geo, model, field)
        name = _layout_text([p.name for p in profiles])
    names = tuple(p.name for p in profiles)
    place(names, model, field)
    return MigLayout(name, names, True)


def _search(items: Sequence[MigProfile], geo: MigGeometry) -> tuple[list[int], bool]:
    """Backtrack over allowed starts: (starts of all items, True) or (deepest partial, False)."""
    free = [True] * geo.memory_slots
    starts: list[int] = []
    deepest: list[int] = []

    def extend() -> bool:
        nonlocal deepest
        if len(starts) > len(deepest):
            deepest = list(starts)
        if len(starts) == len(items):
            return True
        item = items[len(starts)]
        # copies of one profile are interchangeable: trying them in increasing order is enough
        after = starts[-1] if starts and items[len(starts) - 1] is item else -1
        for start in item.starts:
            span = slice(start, start + item.width)
            if start > after and all(free[span]):
                free[span] = [False] * item.width
                starts.append(start)
                if extend():
                    return True
                starts.pop()
                free[span] = [True] * item.width
        return False

    return (starts, True) if extend() else (deepest, False)


def _occupancy(placements: Sequence[Placement], slots: int) -> str:
    """'slots 0-3: 4g.20gb, 4-5: 2g.10gb, 6-7: free': runs of one instance or of free slots."""
    owner: list[int | None] = [None] * slots
    for n, p in enumerate(placements):
        owner[p.start:p.start + p.width] = [n] * p.width
    runs: list[str] = []
    slot = 0
    for owned, run in groupby(owner):
        length = len(list(run))
        span = f"{slot}" if length == 1 else f"{slot}-{slot + length - 1}"
        runs.append(f"{span}: {'free' if owned is None else placements[owned].profile}")
        slot += length
    return "slots " + ", ".join(runs)


def _unplaceable(item: MigProfile, placed: Sequence[Placement], slots: int) -> str:
    """Why `item` has nowhere to go once `placed` are on the GPU."""
    taken = {s for p in placed for s in range(p.start, p.start + p.width)}
    open_starts = [s for s in range(slots - item.width + 1) if taken.isdisjoint(range(s, s + item.width))]
    if open_starts:  # room exists, but not where this profile may begin
        where, allowed = " or ".join(map(str, open_starts)), ", ".join(map(str, item.starts))
        return f"{item.name} cannot start at slot {where}, only at {allowed}"
    room = "slot" if item.width == 1 else f"range of {item.width} slots"
    return f"no free memory {room} for {item.name}"


def place(profiles: Sequence[str], model: GpuModel, field: str = "LAYOUT") -> tuple[Placement, ...]:
    """Place instances on one GPU's memory slots, deterministically, sorted by start."""
    geo = _geometry(model, field)
    items = _ordered([_profile(geo, name, model, field) for name in profiles], geo)
    _check_counts(Counter(items), geo, model, field)
    compute = sum(p.compute for p in items)
    if compute > geo.compute_slices:
        raise UsageError(field, f"too many compute slices: {compute} > {geo.compute_slices}",
                         "use fewer or smaller instances, e.g. all-balanced")
    starts, found = _search(items, geo)
    # `starts` holds one start per item placed: all of them, or those before the first that did not fit
    placed = [Placement(p.name, s, p.width, p.compute) for p, s in zip(items, starts, strict=False)]
    if not found:
        layout = _layout_text([p.name for p in items])
        why = _unplaceable(items[len(starts)], placed, geo.memory_slots)
        occupancy = _occupancy(sorted(placed, key=lambda p: p.start), geo.memory_slots)
        raise UsageError(field, f"{layout} does not fit on one {model.name} GPU: {why} ({occupancy})", _PLAN_HINT)
    return tuple(sorted(placed, key=lambda p: p.start))


def check_layout(text: str, model: GpuModel) -> tuple[bool, str]:
    """(True, "fits") or (False, the one-line reason); for callers that report rather than fail."""
    try:
        parse_layout(text, model)
    except UsageError as err:
        return False, err.one_line()
    return True, "fits"


def render_plan(layout: MigLayout, model: GpuModel) -> str:
    """A monospace slot map of one GPU, one row per memory slot (no trailing newline)."""
    geo = _geometry(model, "LAYOUT")
    if not layout.enabled:
        return f"{model.name}  {layout.name}  MIG disabled: the whole GPU is one nvidia.com/gpu"
    placements = place(layout.profiles, model)
    compute = sum(p.compute for p in placements)
    used = sum(p.width for p in placements)
    lines = [f"{model.name}  {layout.name}  compute {compute}/{geo.compute_slices}  "
             f"memory slots {used}/{geo.memory_slots}"]
    column = max((len(p.profile) for p in placements), default=0)
    by_slot = {s: (n, p) for n, p in enumerate(placements, 1) for s in range(p.start, p.start + p.width)}
    for slot in range(geo.memory_slots):
        if slot in by_slot:
            n, p = by_slot[slot]
            lines.append(f"slot {slot}  {p.profile.ljust(column)}  (instance {n}, compute {p.compute})")
        else:
            lines.append(f"slot {slot}  free")
    return "\n".join(lines)


def plan_rows(layout: MigLayout, model: GpuModel) -> list[dict[str, object]]:
    """The plan as data for -o json: one row per instance, `end` being its last slot."""
    if not layout.enabled:
        return []
    return [{"profile": p.profile, "start": p.start, "end": p.start + p.width - 1, "compute": p.compute}
            for p in place(layout.profiles, model)]


def resource_name(profile: str) -> str:
    """The extended resource the device plugin advertises for a MIG profile (mixed strategy)."""
    return f"nvidia.com/mig-{_label_safe(profile)}"


def _label_safe(text: str) -> str:
    # "+" is not allowed in label values or resource names; upstream spells 1g.5gb+me as 1g.5gb.me,
    # which cannot collide because "." never follows "gb" in a profile name.
    return text.replace("+", ".")


def config_name(layout: MigLayout) -> str:
    """The nvidia.com/mig.config label value (and mig-parted config key) for `layout`."""
    # custom layouts are profile names, which begin with a digit, so only named configs begin "all-"
    name = _label_safe(layout.name if layout.name.startswith("all-") else f"custom-{layout.name}")
    if len(name) <= _LABEL_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:_LABEL_MAX - len(digest) - 1].rstrip('-.')}-{digest}"


def layout_of_config_name(name: str, model: GpuModel) -> MigLayout:
    """The layout `config_name` named (custom-<layout> or a named config, "+" written as "."), on `model`.
    ValueError for a name that is no layout of `model` (a hashed name over the label limit cannot be read back)."""
    text = name.removeprefix("custom-").replace(".me", "+me")  # ".me" never follows "gb" otherwise
    try:
        layout = parse_layout(text, model)
    except UsageError as exc:
        raise ValueError(f"{L.MIG_CONFIG}={name} is no MIG layout of {model.name}: {exc.message}") from None
    if config_name(layout) != name:
        raise ValueError(f"{L.MIG_CONFIG}={name} does not name a MIG layout gpuctl can read back")
    return layout


def _entry(counts: dict[str, int] | None) -> list[dict[str, object]]:
    if counts is None:
        return [{"devices": "all", "mig-enabled": False}]
    return [{"devices": "all", "mig-enabled": True, "mig-devices": dict(counts)}]


def mig_parted_config(layouts: Iterable[MigLayout], existing: dict[str, dict[str, int] | None] | None = None) -> str:
    """The `config.yaml` of a mig-parted ConfigMap: all-disabled, the `existing` configs (as read by
    parse_mig_parted_config; other node groups may use them) and every layout given."""
    configs = {name: _entry(counts) for name, counts in (existing or {}).items()}
    configs["all-disabled"] = _entry(None)
    added: set[str] = set()
    for layout in layouts:
        entry = _entry(dict(Counter(layout.profiles)) if layout.enabled else None)
        name = config_name(layout)
        if name in added and configs[name] != entry:
            # e.g. all-balanced on an a100-40gb and an h100-80gb: one name, two different layouts
            raise ValueError(f"MIG config '{name}' would mean two different layouts; use one GPU model per config")
        configs[name] = entry
        added.add(name)
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=True, default_flow_style=False)


def layout_from_counts(name: str, counts: dict[str, int] | None) -> MigLayout:
    """A layout read back from a mig-parted config entry (None: MIG disabled)."""
    return MigLayout(name, tuple(p for p, n in sorted((counts or {}).items()) for _ in range(n)), counts is not None)


def parse_mig_parted_config(text: str) -> dict[str, dict[str, int] | None]:
    """Config name -> {profile: count}, or None where MIG is disabled. Raises ValueError."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"mig-parted config is not YAML: {err}") from err
    if not isinstance(doc, dict) or doc.get("version") != "v1" or not isinstance(doc.get("mig-configs"), dict):
        raise ValueError("mig-parted config needs 'version: v1' and a 'mig-configs' mapping")
    result: dict[str, dict[str, int] | None] = {}
    for name, entries in doc["mig-configs"].items():
        entry = entries[0] if isinstance(entries, list) and len(entries) == 1 else None
        if not isinstance(name, str) or not isinstance(entry, dict) or entry.get("devices") != "all":
            raise ValueError(f"mig-configs.{name}: expected one entry with 'devices: all'")
        enabled, devices = entry.get("mig-enabled"), entry.get("mig-devices", {})
        if not isinstance(enabled, bool) or not isinstance(devices, dict) or not all(
                isinstance(p, str) and type(n) is int and n > 0 for p, n in devices.items()):
            raise ValueError(f"mig-configs.{name}: needs a boolean mig-enabled and mig-devices of profile: count")
        result[name] = dict(devices) if enabled else None
    return result


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def advertised_resources(layout: MigLayout, gpus: int, strategy: str) -> dict[str, int]:
    """Extended resources the device plugin advertises on a node of `gpus` GPUs with `layout`."""
    if strategy not in MIG_STRATEGIES:
        raise UsageError("--strategy", f"unknown MIG strategy '{strategy}'", f"use {' or '.join(MIG_STRATEGIES)}")
    if not layout.enabled:
        return {"nvidia.com/gpu": gpus}
    counts = Counter(layout.profiles)
    if strategy == "single":
        if len(counts) > 1:
            raise UsageError("--strategy", f"single needs one profile per GPU, layout has {_and(list(counts))}",
                             "use --strategy mixed")
        return {"nvidia.com/gpu": len(layout.profiles) * gpus}
    return {"nvidia.com/gpu": 0, **{resource_name(p): n * gpus for p, n in counts.items()}}
