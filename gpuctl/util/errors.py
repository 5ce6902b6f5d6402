"""The one exception family of gpuctl, each kind mapped to a documented exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Stable process exit codes; scripts may rely on them (documented in docs/reference.md)."""

    OK = 0
    FAILURE = 1  # anything not covered below, e.g. a tool that cannot be installed
    USAGE = 2  # bad flag, argument or spec value; nothing was changed
    CREDENTIALS = 3
    CLOUD = 4
    CLUSTER = 5  # Kubernetes API or Helm failure
    VALIDATION = 6  # a check of the finished platform failed
    TIMEOUT = 7
    INTERRUPTED = 130


class GpuctlError(Exception):
    """An error a user can act on: a one-line message and, when known, the fix."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message.rstrip().rstrip('.')}; {self.hint}"
        return " ".join(text.split())


class UsageError(GpuctlError):
    """A bad input, named by its field (`--nodes`, `nodeGroups[0].gpu`)."""

    exit_code = ExitCode.USAGE

    def __init__(self, field: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{field}: {problem}", hint)
        self.field = field


class ToolError(GpuctlError):
    """A required program (helm, kwokctl, kube-apiserver...) is missing or failed to run."""


class CredentialsError(GpuctlError):
    exit_code = ExitCode.CREDENTIALS


class CloudError(GpuctlError):
    exit_code = ExitCode.CLOUD


class ClusterError(GpuctlError):
    exit_code = ExitCode.CLUSTER


class ValidationFailed(GpuctlError):
    exit_code = ExitCode.VALIDATION


class WaitTimeout(GpuctlError):
    exit_code = ExitCode.TIMEOUT


class RequestTimeout(GpuctlError):
    """A server (kube-apiserver, a cloud API) took no connection or gave no answer within the request
    deadline (gpuctl/util/timeouts.py). Not a WaitTimeout: nothing was being waited for, and code that turns
    a failed wait into another error must let this one through."""

    exit_code = ExitCode.TIMEOUT

    def __init__(self, message: str, hint: str | None = None, server: str | None = None) -> None:
        super().__init__(message, hint)
        self.server = server


class Interrupted(GpuctlError):
    """Ctrl-C (SIGINT) stopped a run of steps: the message names the step, the hint how to resume."""

    exit_code = ExitCode.INTERRUPTED


class NotFound(GpuctlError):
    """A named cluster or node group does not exist (a usage error: the name is wrong)."""

    exit_code = ExitCode.USAGE

SHOWN_PREFIX = 40  # characters of a bad value quoted in an error line


def shown(value: object) -> str:
    """`value` quoted for an error line: at most a short prefix, control characters escaped."""
    text = str(value)
    if len(text) <= SHOWN_PREFIX:
        return repr(text)
    return f"{text[:SHOWN_PREFIX]!r}... ({len(text)} characters)"
