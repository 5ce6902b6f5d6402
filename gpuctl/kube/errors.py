"""The errors of a Kubernetes API request, raised by the client itself (gpuctl/kube/client.py) where the
request is made; callers catch the kind they expect (`except KubeNotFound`) and let the rest propagate.

All are ClusterErrors (exit 5) but a refused credential (KubeUnauthorized, exit 3) and a server that did
not answer in time (KubeTimeout, also a RequestTimeout: exit 7). `detail` is what went wrong, without
context; `message` adds the request ("GET /api/v1/nodes") or, once `requesting(what)` or `in_context`
gave one, what gpuctl was doing ("reading namespace x failed: ..."). Importing this module never imports
the kubernetes package.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from gpuctl.util.errors import ClusterError, CredentialsError, ExitCode, RequestTimeout

E = TypeVar("E", bound="KubeApiError")


class KubeApiError(ClusterError):
    """A Kubernetes API request failed: an error answer (`status` is its HTTP status) or none at all
    (`status` None)."""

    def __init__(self, message: str, hint: str | None = None, **attrs: Any) -> None:
        super().__init__(message, hint)
        self.status: int | None = attrs.pop("status", None)
        self.reason: str | None = attrs.pop("reason", None)  # the HTTP reason phrase
        self.body: str | None = attrs.pop("body", None)  # the answer's body (a Status object as JSON)
        self.headers: Any = attrs.pop("headers", None)
        self.request: str = attrs.pop("request", "")  # "GET /api/v1/nodes"
        self.detail: str = attrs.pop("detail", message)
        self.context: str | None = attrs.pop("context", None)
        if attrs:
            raise TypeError(f"unknown attributes {sorted(attrs)}")

    def in_context(self: E, what: str) -> E:
        """A copy of this error, of the same type, saying `what` failed ("reading namespace x failed: ...").
        An error that has a context already keeps it: the innermost one is the most precise."""
        if self.context is not None:
            return self
        made = copy.copy(self)
        made.context = what
        made.message = f"{what} failed: {self.detail}"
        made.args = (made.message,)
        return made


class KubeNotFound(KubeApiError):
    """HTTP 404: no such object, or (an API group not served) no such resource type."""


class KubeConflict(KubeApiError):
    """HTTP 409: the object exists already, or was changed since it was read (resourceVersion), or an
    apply conflicts with another field manager."""


class KubeUnauthorized(KubeApiError, CredentialsError):
    """HTTP 401: the server does not know who we are; the kubeconfig's credentials are wrong (exit 3)."""

    exit_code = ExitCode.CREDENTIALS


class KubeUnavailable(KubeApiError):
    """The API server is not serving: the connection was refused or dropped, or it answered 5xx or 429."""


class KubeTimeout(RequestTimeout, KubeUnavailable):
    """The API server took no connection or gave no answer within the request deadline (exit 7, as every
    RequestTimeout)."""

    exit_code = ExitCode.TIMEOUT

    def __init__(self, message: str, hint: str | None = None, server: str | None = None, **attrs: Any) -> None:
        RequestTimeout.__init__(self, message, hint, server)  # KubeApiError.__init__ through super()
        for name, value in attrs.items():
            if not hasattr(self, name):
                raise TypeError(f"unknown attribute {name}")
            setattr(self, name, value)


@contextmanager
def requesting(what: str) -> Iterator[None]:
    """Kubernetes API errors raised inside say `what` failed: `with requesting(f"reading namespace {name}"):`."""
    try:
        yield
    except KubeApiError as exc:
        raise exc.in_context(what).with_traceback(exc.__traceback__) from None
