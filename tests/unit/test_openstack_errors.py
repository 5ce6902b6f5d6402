"""Magnum's errors and statuses become gpuctl's exit codes, with the reason and the fix."""

from __future__ import annotations

import json

import pytest

from gpuctl.errors import CloudError, CredentialsError, ExitCode, NotFound, WaitTimeout
from gpuctl.providers.openstack import magnum
from gpuctl.providers.openstack.magnum import http_error, wait_for_status


def magnum_body(status: int, detail: str) -> str:
    return json.dumps({"errors": [{"status": status, "title": "T", "detail": detail}]})


@pytest.mark.parametrize(("status", "kind", "code"), [
    (401, CredentialsError, ExitCode.CREDENTIALS), (403, CredentialsError, ExitCode.CREDENTIALS),
    (404, NotFound, ExitCode.USAGE), (400, CloudError, ExitCode.CLOUD), (409, CloudError, ExitCode.CLOUD),
    (429, CloudError, ExitCode.CLOUD), (500, CloudError, ExitCode.CLOUD), (503, CloudError, ExitCode.CLOUD),
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

    def __init__(self, *records: dict[str, str] | None) -> None:
        self.records = list(records)

    def __call__(self) -> dict[str, str] | None:
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(magnum.time, "sleep", lambda _s: None)


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
