"""Magnum's errors and statuses become gpuctl's exit codes, with the reason and the fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.providers.openstack import waits
from gpuctl.providers.openstack.magnum import http_error, negotiate
from gpuctl.providers.openstack.waits import wait_for_status
from gpuctl.util.errors import CloudError, CredentialsError, ExitCode, NotFound, UsageError, WaitTimeout


def magnum_body(status: int, detail: str) -> str:
    return json.dumps({"errors": [{"status": status, "title": "T", "detail": detail}]})


@pytest.mark.parametrize(("status", "kind", "code"), [
    (401, CredentialsError, ExitCode.CREDENTIALS), (403, CredentialsError, ExitCode.CREDENTIALS),
    (404, NotFound, ExitCode.USAGE), (400, CloudError, ExitCode.CLOUD), (409, CloudError, ExitCode.CLOUD),
    (406, CloudError, ExitCode.CLOUD), (429, CloudError, ExitCode.CLOUD), (500, CloudError, ExitCode.CLOUD),
    (503, CloudError, ExitCode.CLOUD),
])
def test_http_status_maps_to_exit_code(status: int, kind: type, code: ExitCode) -> None:
    error = http_error(status, magnum_body(status, "the detail"), "creating cluster 'x'")
    assert isinstance(error, kind) and error.exit_code == code
    assert "the detail" in error.one_line() and "creating cluster 'x'" in error.one_line()


def test_credential_errors_say_how_to_fix_them() -> None:
    assert "--os-cloud" in http_error(401, "", "listing clusters").one_line()


def test_throttling_says_it_was_retried() -> None:
    assert "retries" in http_error(429, magnum_body(429, "slow down"), "listing clusters").one_line()


def test_keystone_and_plain_bodies_give_their_message() -> None:
    keystone = json.dumps({"error": {"code": 401, "title": "Unauthorized", "message": "bad password?"}})
    assert "bad password?" in http_error(401, keystone, "x").one_line()
    assert "gateway timeout" in http_error(504, "<html> gateway   timeout", "x").one_line()


class Statuses:
    """A read() returning a scripted sequence of records (None: gone)."""

    def __init__(self, *records: dict[str, Any] | None) -> None:
        self.records = list(records)

    def __call__(self) -> dict[str, str] | None:
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waits.time, "sleep", lambda _s: None)


def test_wait_returns_the_record_at_the_goal(capsys: pytest.CaptureFixture[str]) -> None:
    read = Statuses({"status": "CREATE_IN_PROGRESS"}, {"status": "CREATE_COMPLETE"})
    assert wait_for_status(read, "cluster 'a'", ("CREATE_COMPLETE",), 60, "cleanup") == {"status": "CREATE_COMPLETE"}
    assert "waiting for cluster 'a': CREATE_IN_PROGRESS" in capsys.readouterr().err


def test_wait_on_failure_gives_status_reason_and_cleanup() -> None:
    read = Statuses({"status": "CREATE_IN_PROGRESS"},
                    {"status": "CREATE_FAILED", "status_reason": "Quota exceeded for instances"})
    with pytest.raises(CloudError) as info:
        wait_for_status(read, "cluster 'a'", ("CREATE_COMPLETE",), 60, "clean up with 'gpuctl cluster delete'")
    assert "CREATE_FAILED: Quota exceeded for instances" in info.value.one_line()
    assert "gpuctl cluster delete" in info.value.one_line()


def test_wait_for_deletion_ends_when_gone() -> None:
    assert wait_for_status(Statuses({"status": "DELETE_IN_PROGRESS"}, None), "x", None, 60, "c") is None
    # seen between the conductor's last save and its periodic sync destroying the record: done too
    assert wait_for_status(Statuses({"status": "DELETE_IN_PROGRESS"}, {"status": "DELETE_COMPLETE"}), "x", None,
                           60, "c") is None
    with pytest.raises(CloudError):
        wait_for_status(Statuses(None), "x", ("CREATE_COMPLETE",), 60, "c")


def test_wait_has_a_deadline() -> None:
    with pytest.raises(WaitTimeout):
        wait_for_status(Statuses({"status": "UPDATE_IN_PROGRESS"}), "x", ("UPDATE_COMPLETE",), -1, "c")


def test_sdk_exceptions_map_to_exit_codes() -> None:
    import keystoneauth1.exceptions as ka
    from openstack import exceptions as sdk

    from gpuctl.providers.openstack.magnum import sdk_error

    cases = [(ka.Unauthorized(), ExitCode.CREDENTIALS), (ka.MissingRequiredOptions([]), ExitCode.CREDENTIALS),
             (ka.ConnectFailure("refused"), ExitCode.CLOUD), (ka.EndpointNotFound(), ExitCode.CLOUD),
             (sdk.ServiceDisabledException("no container-infra"), ExitCode.CLOUD)]
    for exc, code in cases:
        assert sdk_error(exc, "listing clusters").exit_code == code, exc


@pytest.mark.parametrize(("status", "detail", "flag"), [
    (400, "Unable to find flavor g9.huge.", "--flavor"),  # exception.FlavorNotFound
    (409, "max_node_count for gpu is invalid (node_count (3) should be less or equal to max_node_count (2)).",
     "--max-nodes"),  # exception.NodeGroupInvalidInput
    (400, "Resizing gpu outside the allowed range: min_node_count = 2, max_node_count = 2", "--nodes"),
])
def test_refused_inputs_exit_2_naming_the_flag_with_magnums_reason(status: int, detail: str, flag: str) -> None:
    error = http_error(status, magnum_body(status, detail), "updating node group 'gpu'", field="--nodes")
    assert isinstance(error, UsageError) and error.exit_code == ExitCode.USAGE
    assert error.field == flag and detail in error.one_line()


def test_busy_and_quota_refusals_are_cloud_errors() -> None:
    busy = http_error(400, magnum_body(400, "Cluster os1 already has an operation in progress."), "x", field="--nodes")
    assert busy.exit_code == ExitCode.CLOUD and "wait until it finishes" in busy.one_line()
    # exception.ClusterAPIAddressUnavailable: a node group on a cluster still being made
    unready = http_error(409, magnum_body(409, "Cluster API address is not available yet"), "x", field="--gpu")
    assert unready.exit_code == ExitCode.CLOUD and "wait until it finishes" in unready.one_line()
    quota = http_error(403, magnum_body(403, "Resource limit exceeded: You have reached the maximum clusters"), "x")
    assert quota.exit_code == ExitCode.CLOUD


@pytest.mark.parametrize(("low", "high", "spoken"), [("1.1", "1.14", (1, 14)), ("1.1", "1.11", (1, 11)),
                                                      ("1.1", "1.20", (1, 14)), ("1.10", "1.10", (1, 10))])
def test_microversion_is_the_highest_both_speak(low: str, high: str, spoken: tuple[int, int]) -> None:
    root = {"versions": [{"id": "v1", "status": "CURRENT", "min_version": low, "max_version": high}]}
    assert negotiate(root, {}) == spoken
    headers = {"OpenStack-API-Minimum-Version": f"container-infra {low}",
               "OpenStack-API-Maximum-Version": f"container-infra {high}"}
    assert negotiate(None, headers) == spoken


def test_a_magnum_without_node_groups_is_refused_and_a_silent_one_gets_1_10() -> None:
    with pytest.raises(CloudError, match="serves API microversions 1.1 to 1.8"):
        negotiate({"versions": [{"id": "v1", "min_version": "1.1", "max_version": "1.8"}]}, {})
    assert negotiate({"versions": []}, {}) == (1, 10)


def test_right_after_a_create_a_missing_record_is_not_final() -> None:
    read = Statuses(None, None, {"status": "CREATE_IN_PROGRESS"}, {"status": "CREATE_COMPLETE"})
    assert wait_for_status(read, "x", ("CREATE_COMPLETE",), 60, "c", created=True) == {"status": "CREATE_COMPLETE"}
    gone_again = Statuses(None, {"status": "CREATE_IN_PROGRESS"}, None)
    with pytest.raises(CloudError, match="deleted while gpuctl waited"):
        wait_for_status(gone_again, "x", ("CREATE_COMPLETE",), 60, "c", created=True)


def test_right_after_an_update_the_previous_status_is_not_final() -> None:
    before = {"status": "UPDATE_COMPLETE", "updated_at": "2026-11-22T10:00:00+00:00", "node_count": 2}
    after = {"status": "UPDATE_COMPLETE", "updated_at": "2026-11-22T10:00:31+00:00", "node_count": 3}
    read = Statuses(before, before, {**before, "status": "UPDATE_IN_PROGRESS", "updated_at": "t1"}, after)
    assert wait_for_status(read, "x", ("UPDATE_COMPLETE",), 60, "c", before=before) == after
    # done between two reads: only updated_at tells
    assert wait_for_status(Statuses(before, after), "x", ("UPDATE_COMPLETE",), 60, "c", before=before) == after


def test_right_after_a_delete_the_old_status_is_not_final() -> None:
    before = {"status": "CREATE_COMPLETE", "updated_at": None}
    read = Statuses(before, {"status": "DELETE_IN_PROGRESS", "updated_at": "t1"}, None)
    assert wait_for_status(read, "x", None, 60, "c", before=before) is None
    failed = Statuses(before, {"status": "DELETE_FAILED", "updated_at": "t1", "status_reason": "volume in use"})
    with pytest.raises(CloudError, match="DELETE_FAILED: volume in use"):
        wait_for_status(failed, "x", None, 60, "c", before=before)


def test_an_operation_that_never_starts_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waits, "ACCEPT_TIMEOUT_S", -1)
    before = {"status": "UPDATE_COMPLETE", "updated_at": "t0"}
    with pytest.raises(WaitTimeout, match="operation not started yet"):
        wait_for_status(Statuses(before), "x", ("UPDATE_COMPLETE",), 3600, "c", before=before)


def test_an_accepted_create_is_remembered_until_seen_or_too_old(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.providers.openstack.pending import PendingCreates

    path = tmp_path / "openstack" / "pending.json"
    pending = PendingCreates("http://magnum/v1 p1", path)
    assert pending.get("cluster", "os1") is None
    pending.put("cluster", "os1", "uuid-1")
    assert path.stat().st_mode & 0o777 == 0o600
    uuid, left = pending.get("cluster", "os1")  # type: ignore[misc]
    assert uuid == "uuid-1" and 0 < left <= waits.ACCEPT_TIMEOUT_S
    assert PendingCreates("http://other/v1 p1", path).get("cluster", "os1") is None  # per endpoint and project
    monkeypatch.setattr("gpuctl.providers.openstack.pending.ACCEPT_TIMEOUT_S", -1)
    assert pending.get("cluster", "os1") is None  # too old to still appear: a rerun creates it
    pending.drop("cluster", "os1")
    assert not path.exists()


def test_a_cluster_magnum_cannot_show_while_created_or_deleted_is_not_there(monkeypatch: pytest.MonkeyPatch) -> None:
    # The conductor writes the cluster row before its node groups, and the periodic job destroys the node groups
    # of a deleted cluster before it: a GET in between is a 400 (master_count 0).
    from types import SimpleNamespace

    from gpuctl.providers.openstack.magnum import MagnumApi

    api = object.__new__(MagnumApi)
    body = json.dumps({"errors": [{"detail": "Invalid input for field/attribute master_count. Value: 0."}]})
    api._request = lambda *args, **kwargs: SimpleNamespace(status_code=400, text=body)  # type: ignore[method-assign]
    api._register_token = lambda: None  # type: ignore[method-assign]
    assert api.get_cluster("4b617382-6401-4193-98a1-583f5dbea42d", in_flux=True) is None
    monkeypatch.setattr("gpuctl.providers.openstack.magnum.NO_NODE_GROUPS_S", 0.0)
    with pytest.raises(CloudError, match="master_count"):  # a window that never closes is an error
        api.get_cluster("4b617382-6401-4193-98a1-583f5dbea42d")


def test_reads_outside_a_create_or_delete_wait_out_a_cluster_magnum_cannot_show(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `cluster list` while someone else's cluster is between its row and its node groups: the listing and the
    # cluster's GET answer 400 (master_count 0) for a moment, then the cluster as it is.
    from types import SimpleNamespace

    from gpuctl.providers.openstack.magnum import MagnumApi

    api = object.__new__(MagnumApi)
    cannot_show = SimpleNamespace(status_code=400, text=json.dumps(
        {"errors": [{"detail": "Invalid input for field/attribute master_count. Value: '0'. Value should be "
                               "greater or equal to 1"}]}))
    record = {"uuid": "4b617382-6401-4193-98a1-583f5dbea42d", "name": "theirs", "status": "CREATE_IN_PROGRESS"}

    def shown(doc: Any) -> SimpleNamespace:
        return SimpleNamespace(status_code=200, text=json.dumps(doc), content=b"{}", json=lambda: doc)

    answers = {"/clusters": [cannot_show, cannot_show, shown({"clusters": [record]})],
               f"/clusters/{record['uuid']}": [cannot_show, shown(record)]}
    asked: list[str] = []

    def request(method: str, path: str, doing: str, *args: object, **kwargs: object) -> SimpleNamespace:
        asked.append(path)
        return answers[path].pop(0)

    api._request = request  # type: ignore[method-assign]
    monkeypatch.setattr("gpuctl.providers.openstack.magnum.time.sleep", lambda s: None)
    assert api.list_clusters() == [record]
    assert api.get_cluster(record["uuid"]) == record
    assert asked == ["/clusters"] * 3 + [f"/clusters/{record['uuid']}"] * 2
