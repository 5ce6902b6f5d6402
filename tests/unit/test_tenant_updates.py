"""`tenant add` on an existing team keeps what the command does not name (model.tenant.merged_entry), shows
each change as before -> after (tenant_changes), and reads the team's Kueue settings back from the queue it
wrote (queues.queue_settings); the CLI through a sim cluster: tests/integration/test_tenant_updates.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cli.documents import tenant_document
from gpuctl.model.specfile import load_tenant
from gpuctl.model.tenant import make_tenant, merged_entry, profile_of, tenant_changes, tenant_entry
from gpuctl.ops.tenancy.queues import cluster_queue_manifest, queue_settings
from tests.unit.test_queues import NODES, flavors_of

TEAM = make_tenant("team-a", 2, {"3g.20gb": 1}, "ml-devs", False, "tenant", borrow=1, lend=1, cohort="research")


def updated(*flags: Any) -> Any:
    """The tenant `tenant add team-a` with these tenant_document arguments makes of TEAM."""
    given, names = tenant_document("team-a", *flags)
    return load_tenant(merged_entry(TEAM, given), names)


def test_an_update_keeps_every_field_it_does_not_name() -> None:
    assert updated(None, None, "ml-ops", False) == make_tenant(
        "team-a", 2, {"3g.20gb": 1}, "ml-ops", False, "tenant", borrow=1, lend=1, cohort="research")
    assert updated(4, None, None, False) == make_tenant(
        "team-a", 4, {"3g.20gb": 1}, "ml-devs", False, "tenant", borrow=1, lend=1, cohort="research")


def test_mig_merges_per_profile_and_none_and_zero_clear() -> None:
    assert updated(None, ["1g.5gb=2"], None, False).mig == {"3g.20gb": 1, "1g.5gb": 2}
    assert updated(None, ["3g.20gb=0"], None, False).mig == {}
    assert updated(None, ["none"], None, False).mig == {}


def test_none_and_all_bring_a_field_back_to_its_default() -> None:
    cleared = updated(None, None, "none", False, None, "all")
    assert cleared.group is None and cleared.lend is None and cleared.gpus == 2 and cleared.borrow == 1


def test_a_new_team_gets_the_defaults() -> None:
    given, names = tenant_document("team-b", None, None, None, False)
    assert load_tenant(merged_entry(None, given), names) == make_tenant("team-b", 0, {}, None, False, "tenant")


def test_an_empty_value_is_refused_not_a_clear() -> None:
    given, names = tenant_document("team-a", None, None, "", False)
    with pytest.raises(Exception, match="--group"):
        load_tenant(merged_entry(TEAM, given), names)


def test_the_entry_of_a_tenant_reads_back_as_that_tenant() -> None:
    assert load_tenant(tenant_entry(TEAM), {}) == TEAM


def test_changes_are_one_line_per_field_before_to_after() -> None:
    after = make_tenant("team-a", 4, {"1g.5gb+me": 1}, None, False, "tenant", borrow=1, cohort="research")
    assert tenant_changes(TEAM, after) == [
        "quota nvidia.com/gpu: 2 -> 4", "quota nvidia.com/mig-1g.5gb.me: 0 -> 1",
        "quota nvidia.com/mig-3g.20gb: 1 -> 0", "group: ml-devs -> -", "lend: 1 -> all"]
    assert tenant_changes(TEAM, TEAM) == []
    assert tenant_changes(None, make_tenant("team-b", 2, {}, None, False, "t")) == ["quota nvidia.com/gpu: 0 -> 2"]
    assert profile_of("nvidia.com/mig-1g.5gb.me") == "1g.5gb+me" and profile_of("nvidia.com/gpu") is None


@pytest.mark.parametrize("lend", [None, 0, 1, 2, 50])
def test_the_queue_gives_back_borrow_lend_and_cohort_that_write_it_again(lend: int | None) -> None:
    team = make_tenant("team-a", 2, {"3g.20gb": 1}, None, False, "t", borrow=3, lend=lend, cohort="research")
    flavors = flavors_of(NODES)
    queue = cluster_queue_manifest(team, flavors)
    borrow, read_lend, cohort = queue_settings(queue)
    assert (borrow, cohort) == (3, "research")
    again = make_tenant("team-a", 2, {"3g.20gb": 1}, None, False, "t", borrow=borrow, lend=read_lend, cohort=cohort or "")
    assert cluster_queue_manifest(again, flavors) == queue
    assert queue_settings(None) == (0, None, None)
