from __future__ import annotations

import re
from collections import Counter
from itertools import combinations, combinations_with_replacement, product

import pytest
import yaml

from gpuctl.model.catalog import GPUS, GpuModel
from gpuctl.model.mig import (
    NAMED,
    MigLayout,
    Placement,
    _unplaceable,
    advertised_resources,
    check_layout,
    config_name,
    mig_parted_config,
    parse_layout,
    parse_mig_parted_config,
    place,
    plan_rows,
    render_plan,
)
from gpuctl.util.errors import UsageError

A100 = GPUS["a100-40gb"]
A30 = GPUS["a30"]
MIG_GPUS = [m for m in GPUS.values() if m.mig is not None]
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def error(text: str, model: GpuModel = A100) -> str:
    with pytest.raises(UsageError) as caught:
        parse_layout(text, model)
    return caught.value.one_line()


def starts(text: str, model: GpuModel = A100) -> list[tuple[str, int]]:
    return [(p.profile, p.start) for p in place(parse_layout(text, model).profiles, model)]


# --- parsing -------------------------------------------------------------------------------

def test_layout_is_normalised_widest_first_with_counts() -> None:
    layout = parse_layout("2X2g.10gb-3g.20gb", A100)
    assert layout == MigLayout("3g.20gb-2x2g.10gb", ("3g.20gb", "2g.10gb", "2g.10gb"), True)
    assert parse_layout("1g.5gb-3g.20gb-1g.5gb-2g.10gb", A100).name == "3g.20gb-2g.10gb-2x1g.5gb"
    assert parse_layout("1g.5gb+me-1g.5gb", A100).name == "1g.5gb-1g.5gb+me"  # equal size: catalog order


@pytest.mark.parametrize("text", ["", "   ", "0x1g.5gb", "x1g.5gb", "2x", "2xx1g.5gb", "3g.20gb--1g.5gb", "-",
                                  "1g.5gb-"])
def test_malformed_layouts_name_the_field(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_layout(text, A100, field="nodeGroups[0].mig")
    assert caught.value.field == "nodeGroups[0].mig"


def test_huge_repeat_count_is_rejected_without_expanding() -> None:
    assert error("999999999x1g.5gb").startswith(
        "LAYOUT: at most 7 x 1g.5gb fit on one a100-40gb GPU, got 999999999")


@pytest.mark.parametrize("name", ["t4", "a10g", "l4", "l40s"])
def test_gpus_without_mig_are_rejected(name: str) -> None:
    for text in ("all-balanced", "all-disabled", "1g.5gb"):
        assert error(text, GPUS[name]) == (f"LAYOUT: {name} does not support MIG; "
                                           "use --slices N (time-slicing) or MPS instead")


def test_unknown_profile_lists_the_gpus_profiles() -> None:
    expected = ("LAYOUT: unknown profile '2g.20gb' for a100-40gb; use one of: "
                "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb")
    assert error("3g.20gb-2g.20gb") == expected
    assert error("all-2g.20gb") == expected
    assert "3g.40gb" in error("3g.20gb", GPUS["h100-80gb"])


# --- named configs -------------------------------------------------------------------------

@pytest.mark.parametrize("model", MIG_GPUS, ids=lambda m: m.name)
def test_named_configs_on_every_mig_gpu(model: GpuModel) -> None:
    assert model.mig is not None
    assert parse_layout("all-disabled", model) == MigLayout("all-disabled", (), False)
    assert parse_layout("all-enabled", model) == MigLayout("all-enabled", (), True)
    balanced = parse_layout("all-balanced", model)
    assert balanced.name == "all-balanced" and Counter(balanced.profiles) == Counter(model.mig.balanced)
    assert sum(p.width for p in place(balanced.profiles, model)) == model.mig.memory_slots
    for profile in model.mig.profiles:
        layout = parse_layout(f"all-{profile.name}", model)
        assert layout.name == f"all-{profile.name}" and set(layout.profiles) == {profile.name}
    assert set(NAMED) == {"all-disabled", "all-enabled", "all-balanced"}


def test_all_profile_is_as_many_as_fit_on_one_gpu() -> None:
    def counts(model: GpuModel) -> dict[str, int]:
        assert model.mig is not None
        return {p.name: len(parse_layout(f"all-{p.name}", model).profiles) for p in model.mig.profiles}

    assert counts(A100) == {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2,
                            "4g.20gb": 1, "7g.40gb": 1}
    assert counts(A30) == {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}


# --- placement geometry ---------------------------------------------------------------------

def test_mixed_layout_only_fits_with_the_2gs_first() -> None:
    assert starts("3g.20gb-2x2g.10gb") == [("2g.10gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)]


def test_seven_1g_leave_slot_7_unused() -> None:
    assert starts("7x1g.5gb") == [("1g.5gb", s) for s in range(7)]


def test_4g_and_3g_fit_side_by_side() -> None:
    assert starts("4g.20gb-3g.20gb") == [("4g.20gb", 0), ("3g.20gb", 4)]


def test_other_gpus_use_their_own_profile_names() -> None:
    assert starts("3g.40gb-2x2g.20gb", GPUS["h100-80gb"]) == [("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]
    assert starts("7x1g.10gb", GPUS["a100-80gb"]) == [("1g.10gb", s) for s in range(7)]
    assert starts("4x1g.10gb", A100) == [("1g.10gb", s) for s in (0, 2, 4, 6)]  # the double-memory 1g
    assert starts("2x3g.71gb", GPUS["h200"]) == [("3g.71gb", 0), ("3g.71gb", 4)]
    assert starts("4g.90gb-3g.90gb", GPUS["b200"]) == [("4g.90gb", 0), ("3g.90gb", 4)]


def test_a30_geometry() -> None:
    assert starts("2x2g.12gb", A30) == [("2g.12gb", 0), ("2g.12gb", 2)]
    assert starts("4g.24gb", A30) == [("4g.24gb", 0)]
    assert starts("4x1g.6gb", A30) == [("1g.6gb", s) for s in range(4)]
    assert starts("1g.6gb-2g.12gb-1g.6gb", A30) == [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)]
    assert error("2g.12gb+me-2g.12gb+me", A30).startswith("LAYOUT: at most one +me instance per GPU")
    assert error("1g.6gb+me-2g.12gb+me", A30).startswith("LAYOUT: at most one +me instance per GPU")
    assert error("4g.24gb-1g.6gb", A30).startswith("LAYOUT: too many compute slices: 5 > 4")


def test_full_compute_but_no_free_memory_slot() -> None:
    assert error("3g.20gb-3g.20gb-1g.5gb") == (
        "LAYOUT: 2x3g.20gb-1g.5gb does not fit on one a100-40gb GPU: no free memory slot for 1g.5gb "
        "(slots 0-3: 3g.20gb, 4-7: 3g.20gb); see 'gpuctl mig plan' for the slot map, or use all-balanced")


def test_memory_range_too_wide_is_named() -> None:
    assert error("3g.20gb-2g.10gb-2x1g.10gb") == (
        "LAYOUT: 3g.20gb-2g.10gb-2x1g.10gb does not fit on one a100-40gb GPU: no free memory range of 2 slots "
        "for 1g.10gb (slots 0-3: 3g.20gb, 4-5: 2g.10gb, 6-7: 1g.10gb); "
        "see 'gpuctl mig plan' for the slot map, or use all-balanced")


def test_free_but_misaligned_slot_is_explained() -> None:
    # With 4g@0 and 2g@4 a second 2g only finds slots 6-7 free, and 2g never starts at 6. place()
    # reports the compute total for 4g.20gb-2x2g.10gb first (8 > 7), so the geometry is shown directly.
    placed = [Placement("4g.20gb", 0, 4, 4), Placement("2g.10gb", 4, 2, 2)]
    two_g = A100.mig.profile("2g.10gb") if A100.mig else None
    assert two_g is not None
    assert _unplaceable(two_g, placed, 8) == "2g.10gb cannot start at slot 6, only at 0, 2, 4"
    assert error("4g.20gb-2x2g.10gb") == ("LAYOUT: too many compute slices: 8 > 7; "
                                          "use fewer or smaller instances, e.g. all-balanced")


def test_count_limits_come_before_the_compute_total() -> None:
    assert error("4x2g.10gb") == ("LAYOUT: at most 3 x 2g.10gb fit on one a100-40gb GPU, got 4; "
                                  "use all-2g.10gb for the most that fit")
    assert error("8x1g.5gb").startswith("LAYOUT: at most 7 x 1g.5gb fit on one a100-40gb GPU, got 8")
    assert error("2x1g.5gb+me") == ("LAYOUT: at most one +me instance per GPU; "
                                    "keep one +me profile and use plain profiles for the others")
    assert starts("1g.5gb+me-6x1g.5gb")[0] == ("1g.5gb", 0)


def test_place_accepts_profiles_in_any_order() -> None:
    assert place(["2g.10gb", "3g.20gb", "2g.10gb"], A100) == (
        Placement("2g.10gb", 0, 2, 2), Placement("2g.10gb", 2, 2, 2), Placement("3g.20gb", 4, 4, 3))
    assert place([], A100) == ()


def test_check_layout_never_raises() -> None:
    assert check_layout("all-balanced", A100) == (True, "fits")
    assert check_layout("8x1g.5gb", A100) == (False, "LAYOUT: at most 7 x 1g.5gb fit on one a100-40gb GPU, "
                                                     "got 8; use all-1g.5gb for the most that fit")
    assert check_layout("all-balanced", GPUS["t4"])[0] is False


def _fits_by_brute_force(names: tuple[str, ...], model: GpuModel) -> bool:
    """An independent checker: the rules, then every combination of start slots per profile."""
    geo = model.mig
    assert geo is not None
    counts = Counter(names)
    profiles = {name: found for name in counts if (found := geo.profile(name)) is not None}
    assert len(profiles) == len(counts), names
    if sum(n for name, n in counts.items() if name.endswith("+me")) > 1:
        return False
    if any(n > profiles[name].max_count for name, n in counts.items()):
        return False
    if sum(profiles[name].compute for name in names) > geo.compute_slices:
        return False
    masks_per_profile: list[list[int]] = []
    for name, n in counts.items():
        p = profiles[name]
        masks: list[int] = [sum(((1 << p.width) - 1) << s for s in chosen) for chosen in combinations(p.starts, n)]
        masks_per_profile.append([m for m in masks if m.bit_count() == n * p.width])  # copies overlap otherwise
    for chosen_masks in product(*masks_per_profile):
        union = 0
        for mask in chosen_masks:
            if union & mask:
                break
            union |= mask
        else:
            return union < 1 << geo.memory_slots
    return False


@pytest.mark.parametrize("model", MIG_GPUS, ids=lambda m: m.name)
def test_place_agrees_with_brute_force_on_every_multiset(model: GpuModel) -> None:
    geo = model.mig
    assert geo is not None
    names = [p.name for p in geo.profiles]
    labels: dict[str, tuple[str, ...]] = {}
    for size in range(1, 8):
        for combo in combinations_with_replacement(names, size):
            expected = _fits_by_brute_force(combo, model)
            try:
                placements = place(combo, model)
            except UsageError:
                assert not expected, combo
                continue
            assert expected, combo
            assert Counter(p.profile for p in placements) == Counter(combo)
            used: set[int] = set()
            for p in placements:
                placed = geo.profile(p.profile)
                assert placed is not None and p.start in placed.starts, (combo, p)
                span = set(range(p.start, p.start + p.width))
                assert not used & span and max(span) < geo.memory_slots, (combo, p)
                used |= span
            assert [p.start for p in placements] == sorted(p.start for p in placements)
            layout = parse_layout("-".join(combo), model)
            assert parse_layout(layout.name, model) == layout  # the normalised name reads back
            name = config_name(layout)
            assert LABEL_VALUE.match(name) and len(name) <= 63, name
            assert labels.setdefault(name, layout.profiles) == layout.profiles, name  # no collisions


# --- plan ----------------------------------------------------------------------------------

def test_render_plan_slot_map() -> None:
    assert render_plan(parse_layout("3g.20gb-2x2g.10gb", A100), A100) == "\n".join([
        "a100-40gb  3g.20gb-2x2g.10gb  compute 7/7  memory slots 8/8",
        "slot 0  2g.10gb  (instance 1, compute 2)",
        "slot 1  2g.10gb  (instance 1, compute 2)",
        "slot 2  2g.10gb  (instance 2, compute 2)",
        "slot 3  2g.10gb  (instance 2, compute 2)",
        "slot 4  3g.20gb  (instance 3, compute 3)",
        "slot 5  3g.20gb  (instance 3, compute 3)",
        "slot 6  3g.20gb  (instance 3, compute 3)",
        "slot 7  3g.20gb  (instance 3, compute 3)",
    ])


def test_render_plan_free_slots_and_disabled() -> None:
    lines = render_plan(parse_layout("all-1g.5gb", A100), A100).splitlines()
    assert lines[0] == "a100-40gb  all-1g.5gb  compute 7/7  memory slots 7/8"
    assert lines[7:] == ["slot 6  1g.5gb  (instance 7, compute 1)", "slot 7  free"]
    assert render_plan(parse_layout("all-enabled", A30), A30).splitlines() == [
        "a30  all-enabled  compute 0/4  memory slots 0/4",
        "slot 0  free", "slot 1  free", "slot 2  free", "slot 3  free"]
    assert render_plan(parse_layout("all-disabled", A100), A100) == (
        "a100-40gb  all-disabled  MIG disabled: the whole GPU is one nvidia.com/gpu")


def test_plan_rows() -> None:
    assert plan_rows(parse_layout("4g.20gb-3g.20gb", A100), A100) == [
        {"profile": "4g.20gb", "start": 0, "end": 3, "compute": 4},
        {"profile": "3g.20gb", "start": 4, "end": 7, "compute": 3},
    ]
    assert plan_rows(parse_layout("all-disabled", A100), A100) == []


# --- mig-parted and node labels --------------------------------------------------------------

def test_config_names() -> None:
    assert config_name(parse_layout("3g.20gb-2x2g.10gb", A100)) == "custom-3g.20gb-2x2g.10gb"
    assert config_name(parse_layout("1g.5gb+me-3g.20gb", A100)) == "custom-3g.20gb-1g.5gb.me"
    assert config_name(parse_layout("all-1g.5gb+me", A100)) == "all-1g.5gb.me"  # mig-parted's own spelling


@pytest.mark.parametrize("model", MIG_GPUS, ids=lambda m: m.name)
def test_config_names_are_label_safe(model: GpuModel) -> None:
    assert model.mig is not None
    texts = [*NAMED, *(f"all-{p.name}" for p in model.mig.profiles)]
    me = next(p.name for p in model.mig.profiles if p.name.endswith("+me"))
    texts += [f"{me}-{model.mig.balanced[0]}", f"{me}-{model.mig.balanced[-1]}"]
    for text in texts:
        name = config_name(parse_layout(text, model))
        assert LABEL_VALUE.match(name) and len(name) <= 63, name


def test_long_config_names_are_truncated_with_a_hash() -> None:
    long_a = MigLayout("-".join(["1g.23gb+me"] * 9), ("1g.23gb+me",) * 9, True)
    long_b = MigLayout("-".join(["1g.23gb+me"] * 10), ("1g.23gb+me",) * 10, True)
    a, b = config_name(long_a), config_name(long_b)
    assert len(a) == 63 and LABEL_VALUE.match(a) and a.startswith("custom-1g.23gb.me-1g.23gb.me")
    assert a != b and LABEL_VALUE.match(b) and config_name(long_a) == a


def test_mig_parted_config_round_trips() -> None:
    layouts = [parse_layout(t, A100) for t in ("3g.20gb-2x2g.10gb", "all-balanced", "all-enabled", "all-1g.5gb+me")]
    text = mig_parted_config(layouts)
    assert text == mig_parted_config(reversed(layouts))
    doc = yaml.safe_load(text)
    assert doc["version"] == "v1"
    assert doc["mig-configs"]["custom-3g.20gb-2x2g.10gb"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 2}}]
    assert parse_mig_parted_config(text) == {
        "all-disabled": None,
        "all-enabled": {},
        "all-balanced": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
        "all-1g.5gb.me": {"1g.5gb+me": 1},
        "custom-3g.20gb-2x2g.10gb": {"3g.20gb": 1, "2g.10gb": 2},
    }
    assert parse_mig_parted_config(mig_parted_config([])) == {"all-disabled": None}


def test_one_config_name_cannot_mean_two_layouts() -> None:
    with pytest.raises(ValueError, match="all-balanced"):
        mig_parted_config([parse_layout("all-balanced", A100), parse_layout("all-balanced", GPUS["h100-80gb"])])
    same = [parse_layout("all-balanced", GPUS["a100-80gb"]), parse_layout("all-balanced", GPUS["h100-80gb"])]
    assert "all-balanced" in parse_mig_parted_config(mig_parted_config(same))


@pytest.mark.parametrize("text", [
    "", "[]", "{", "version: v2\nmig-configs: {}", "version: v1",
    "version: v1\nmig-configs: {a: []}",
    "version: v1\nmig-configs: {a: [{devices: all}]}",
    "version: v1\nmig-configs: {a: [{devices: [0], mig-enabled: false}]}",
    "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 0}}]}",
    "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: [1g.5gb]}]}",
])
def test_malformed_mig_parted_config(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mig_parted_config(text)


def test_advertised_resources() -> None:
    mixed = parse_layout("3g.20gb-2x2g.10gb", A100)
    assert advertised_resources(mixed, 8, "mixed") == {
        "nvidia.com/gpu": 0, "nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-2g.10gb": 16}
    assert advertised_resources(parse_layout("all-1g.5gb", A100), 8, "single") == {"nvidia.com/gpu": 56}
    assert advertised_resources(parse_layout("all-1g.5gb", A100), 2, "mixed") == {
        "nvidia.com/gpu": 0, "nvidia.com/mig-1g.5gb": 14}
    assert advertised_resources(parse_layout("1g.5gb+me", A100), 1, "mixed") == {
        "nvidia.com/gpu": 0, "nvidia.com/mig-1g.5gb.me": 1}
    for strategy in ("mixed", "single"):
        assert advertised_resources(parse_layout("all-disabled", A100), 8, strategy) == {"nvidia.com/gpu": 8}
        assert advertised_resources(parse_layout("all-enabled", A100), 8, strategy) == {"nvidia.com/gpu": 0}
    with pytest.raises(UsageError) as caught:
        advertised_resources(mixed, 8, "single")
    assert caught.value.one_line() == ("--strategy: single needs one profile per GPU, layout has 3g.20gb and 2g.10gb; "
                                       "use --strategy mixed")
    with pytest.raises(UsageError) as caught:
        advertised_resources(parse_layout("all-balanced", A100), 1, "single")
    assert "layout has 3g.20gb, 2g.10gb and 1g.5gb" in caught.value.one_line()
    with pytest.raises(UsageError) as caught:
        advertised_resources(mixed, 8, "none")
    assert caught.value.one_line() == "--strategy: unknown MIG strategy 'none'; use mixed or single"
