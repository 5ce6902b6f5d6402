from gpuctl.util.errors import (
    CloudError,
    ClusterError,
    CredentialsError,
    ExitCode,
    GpuctlError,
    NotFound,
    UsageError,
    ValidationFailed,
    WaitTimeout,
)


def test_exit_codes_are_stable() -> None:
    assert [GpuctlError.exit_code, UsageError.exit_code, CredentialsError.exit_code, CloudError.exit_code,
            ClusterError.exit_code, ValidationFailed.exit_code, WaitTimeout.exit_code, NotFound.exit_code] == \
        [1, 2, 3, 4, 5, 6, 7, 2]
    assert ExitCode.INTERRUPTED == 130


def test_one_line_joins_message_and_hint() -> None:
    err = UsageError("--nodes", "must be at least 1,\n got 0", "pass --nodes 1 or more")
    assert err.one_line() == "--nodes: must be at least 1, got 0; pass --nodes 1 or more"
    assert GpuctlError("plain").one_line() == "plain"
