"""Request deadlines: how long gpuctl lets one call to a server (kube-apiserver, helm, AWS, OpenStack) take.

A server that accepts the connection and never answers (a frozen process, a black-holed load
balancer) would otherwise hang gpuctl forever. Every client gets these deadlines in one place;
`GPUCTL_REQUEST_TIMEOUT` (seconds) replaces the read deadline, and the connect deadline is never
longer than it. Waits for a state (nodes Ready, capacity, MIG) have their own, longer deadlines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuctl.util.errors import UsageError

CONNECT_S = 10.0  # TCP connect and TLS handshake
READ_S = 30.0  # from request sent to the first byte of the answer
ENV = "GPUCTL_REQUEST_TIMEOUT"
CLOUD_ATTEMPTS = 2  # a cloud call that timed out is tried once more; then it fails with exit 7
HELM_QUERY_S = 60.0  # helm status / history / get values: client-go's own 10 s TLS handshake deadline, retried
HELM_CHART_S = 300.0  # helm show chart / pull: a chart repository or OCI mirror, not the API server
HELM_MARGIN_S = 60.0  # past helm's own --timeout (its waits), for a --rollback-on-failure rollback to finish


@dataclass(frozen=True)
class Deadlines:
    connect: float
    read: float

    @property
    def pair(self) -> tuple[float, float]:
        return self.connect, self.read


def request_deadlines() -> Deadlines:
    """The connect and read deadlines of one request, with GPUCTL_REQUEST_TIMEOUT applied."""
    read = READ_S
    if value := os.environ.get(ENV, "").strip():
        try:
            read = float(value)
        except ValueError:
            raise UsageError(ENV, f"{value!r} is not a number of seconds") from None
        if read <= 0:
            raise UsageError(ENV, f"{value!r} must be more than 0 seconds")
    return Deadlines(connect=min(CONNECT_S, read), read=read)


def scaled(seconds: float) -> float:
    """A helm deadline, shortened in proportion when GPUCTL_REQUEST_TIMEOUT shortens requests."""
    return seconds * min(1.0, request_deadlines().read / READ_S)
