"""A small client of Prometheus's HTTP API (/api/v1/query, /api/v1/query_range), the metrics of a cluster.

Like the Kubernetes client (client.py), every request has gpuctl's request deadlines (gpuctl/util/timeouts.py:
connect 10 s, answer 30 s, GPUCTL_REQUEST_TIMEOUT), and every failure is one typed error naming the server:
a refused connection or a name that does not resolve ClusterError (exit 5), no answer within the deadline
RequestTimeout (exit 7), refused credentials CredentialsError (exit 3), an error answer ClusterError with
Prometheus's own `errorType: error`. Importing this module does not import urllib3 (a LazyImport).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from gpuctl import __version__
from gpuctl.util import redact
from gpuctl.util.errors import ClusterError, CredentialsError, RequestTimeout, UsageError, shown
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.timeouts import ENV, request_deadlines

if TYPE_CHECKING:
    from collections.abc import Mapping

    import urllib3
    import urllib3.exceptions as urllib3_exceptions
    import urllib3.util.retry as urllib3_retry
else:
    urllib3 = LazyImport("urllib3")
    urllib3_exceptions = LazyImport("urllib3.exceptions", "urllib3")
    urllib3_retry = LazyImport("urllib3.util.retry", "urllib3")

URL_ENV = "GPUCTL_PROMETHEUS_URL"
MAX_ANSWER = 64 * 1024 * 1024  # bytes of one answer: a cluster's GPU series are far fewer
CONNECT_RETRIES = 2  # a refused connection again at once, twice (a port-forward that is still starting)
QUERY_THREADS = 8  # queries of one command in flight at once (query_all)
_URL_MAX = 2048


@dataclass(frozen=True)
class Sample:
    """One series of an instant query: its labels and its value at the query's time."""

    labels: dict[str, str]
    value: float


Series = tuple[dict[str, str], list[tuple[float, float]]]  # a range query's series: labels, (time, value)s


@dataclass(frozen=True)
class PrometheusUrl:
    """A checked Prometheus base URL: what requests go to, and what messages show (no credentials)."""

    base: str  # scheme://host[:port][/path], no trailing slash, no credentials
    username: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        return self.base


def check_prometheus_url(url: str, field: str = "--prometheus") -> PrometheusUrl:
    """`url` as a Prometheus base URL (http or https, a host, an optional path prefix such as /prometheus),
    else a UsageError naming `field`. Credentials in the URL (user:password@) are sent as basic auth and
    never shown."""
    hint = "pass the base URL Prometheus serves its API under, e.g. http://127.0.0.1:9090"
    text = url.strip()
    if not text or len(text) > _URL_MAX or not text.isascii() or not text.isprintable() or " " in text:
        raise UsageError(field, f"{shown(url)} is not a URL", hint)
    try:
        parts = urlsplit(text)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise UsageError(field, f"{shown(_without_credentials(text))} is not a URL ({exc})", hint) from None
    if parts.scheme not in ("http", "https"):
        raise UsageError(field, f"{shown(_without_credentials(text))}: the scheme must be http or https", hint)
    if not parts.hostname:
        raise UsageError(field, f"{shown(_without_credentials(text))} names no host", hint)
    if parts.query or parts.fragment:
        raise UsageError(field, f"{shown(_without_credentials(text))}: a base URL takes no query or fragment", hint)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{port}" if port is not None else host
    base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    if parts.password:
        redact.register(parts.password)
    return PrometheusUrl(base, parts.username or None, parts.password or None)


def _without_credentials(text: str) -> str:
    scheme, sep, rest = text.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep and "@" in rest.split("/", 1)[0] else text


class Prometheus:
    """Queries to one Prometheus; `field` is the input that named it (in errors about the URL)."""

    def __init__(self, url: str | PrometheusUrl, field: str = "--prometheus") -> None:
        self.url = url if isinstance(url, PrometheusUrl) else check_prometheus_url(url, field)
        self.field = field
        self._pool: Any = None

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """The instant vector `expr` evaluates to (now, or at unix time `at`); a scalar as one unlabelled
        sample."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        data = self._call("/api/v1/query", params)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            return [Sample({}, _number(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise self._odd(f"an instant query answered resultType {kind!r}, not a vector")
        samples = []
        for s in result:
            value = s.get("value") if isinstance(s, dict) else None
            if not isinstance(value, list) or len(value) != 2:
                raise self._odd("an instant query answered a sample without [time, value]")
            samples.append(Sample(self._labels(s), _number(value[1])))
        return samples

    def query_all(self, exprs: Mapping[str, str]) -> dict[str, list[Sample]]:
        """Each named instant query, all at once (Prometheus evaluates them in parallel); the first error in the
        order given is raised."""
        self._manager()  # one connection pool for all, made before the threads share it
        with ThreadPoolExecutor(max_workers=max(1, min(QUERY_THREADS, len(exprs)))) as pool:
            futures = {name: pool.submit(self.query, expr) for name, expr in exprs.items()}
            return {name: future.result() for name, future in futures.items()}

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """Each series of `expr` from `start` to `end` every `step` seconds: (labels, [(time, value)])."""
        data = self._call("/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                  "step": f"{step:g}"})
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise self._odd(f"a range query answered resultType {data.get('resultType')!r}, not a matrix")
        series = []
        for s in data["result"]:
            values = s.get("values") if isinstance(s, dict) else None
            if not isinstance(values, list) or not all(isinstance(p, list) and len(p) == 2 for p in values):
                raise self._odd("a range query answered a series without [[time, value], ...]")
            series.append((self._labels(s), [(_number(t), _number(v)) for t, v in values]))
        return series

    def _labels(self, series: dict[str, Any]) -> dict[str, str]:
        """A series' labels, which Prometheus always writes as an object of strings."""
        labels = series.get("metric") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise self._odd("an answer's series labels are not an object of strings")
        return labels

    # -- transport ---------------------------------------------------------------------------------------

    def _manager(self) -> Any:
        if self._pool is None:
            deadlines = request_deadlines()
            headers = {"Accept": "application/json", "User-Agent": f"gpuctl/{__version__}"}
            if self.url.username is not None:
                headers.update(urllib3.make_headers(basic_auth=f"{self.url.username}:{self.url.password or ''}"))
            # A refused connection is tried again at once; a request that timed out is not (a frozen server
            # would hold gpuctl several deadlines), nor is an error answer (it is Prometheus's verdict).
            retries = urllib3_retry.Retry(total=None, connect=CONNECT_RETRIES, read=0, redirect=2, status=0, other=0,
                                          raise_on_status=False)
            self._pool = urllib3.PoolManager(timeout=urllib3.Timeout(connect=deadlines.connect,
                                                                     read=deadlines.read),
                                             retries=retries, headers=headers)
        return self._pool

    def _call(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """POST the form `params` to `path` (Prometheus takes queries as forms: no URL length limit) and
        return the answer's `data`."""
        started = time.monotonic()
        try:
            answer = self._manager().request("POST", self.url.base + path, fields=dict(params),
                                             encode_multipart=False, preload_content=False)
            try:
                body = answer.read(MAX_ANSWER + 1)
            finally:
                answer.release_conn()
        except (urllib3_exceptions.HTTPError, OSError) as exc:
            raise self._transport_error(exc, time.monotonic() - started, path) from None
        if len(body) > MAX_ANSWER:
            raise ClusterError(f"Prometheus at {self.url.shown} answered {path} with more than "
                               f"{MAX_ANSWER // 2**20} MiB", "narrow the query (--nodegroup, --tenant)")
        return self._data(answer.status, body, path)

    def _data(self, status: int, body: bytes, path: str) -> dict[str, Any]:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
            if status in (401, 403):
                raise CredentialsError(f"Prometheus at {self.url.shown} refused the request (HTTP {status})",
                                       "put the credentials it takes in the URL (https://user:password@host)")
            raise self._odd(f"{path} answered HTTP {status} with no Prometheus API answer (is this Prometheus's "
                            "base URL?)")
        if doc["status"] == "error":
            what = " ".join(str(doc.get("error") or "no reason given").split())
            if status in (401, 403):
                raise CredentialsError(f"Prometheus at {self.url.shown} refused the request (HTTP {status}): {what}")
            raise ClusterError(f"Prometheus at {self.url.shown} answered an error ({doc.get('errorType') or status})"
                               f": {what}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise self._odd(f"{path} answered no data")
        return data

    def _odd(self, what: str) -> ClusterError:
        return ClusterError(f"Prometheus at {self.url.shown}: {what}",
                            f"check {self.field} (or {URL_ENV}): it must be Prometheus's base URL")

    def _transport_error(self, exc: BaseException, elapsed: float, path: str) -> ClusterError | RequestTimeout:
        """No answer at all: a timeout RequestTimeout (exit 7), anything else ClusterError (exit 5), each
        naming the URL."""
        reason = exc.reason if isinstance(exc, urllib3_exceptions.MaxRetryError) and exc.reason is not None else exc
        where = f"Prometheus at {self.url.shown}"
        fix = (f"check {self.field} (or {URL_ENV}) and that Prometheus is up and reachable from here, e.g. "
               "kubectl port-forward -n monitoring svc/prometheus 9090")
        # NewConnectionError (and NameResolutionError) subclass ConnectTimeoutError in urllib3: test it first.
        if isinstance(reason, urllib3_exceptions.NewConnectionError):
            cause = str(reason).split(": ", 1)[-1] if ": " in str(reason) else type(reason).__name__
            return ClusterError(f"cannot connect to {where}: {cause}", fix)
        if isinstance(reason, (urllib3_exceptions.TimeoutError, TimeoutError)):
            return RequestTimeout(f"{where} did not answer POST {path} within {elapsed:.0f}s",
                                  f"{fix} (request deadline: {ENV}, default {request_deadlines().read:.0f}s)",
                                  server=self.url.shown)
        if isinstance(reason, urllib3_exceptions.SSLError):
            return ClusterError(f"TLS with {where} failed: {reason}", fix)
        if isinstance(reason, (urllib3_exceptions.ProtocolError, ConnectionError)):
            return ClusterError(f"{where} dropped the connection on POST {path}", fix)
        return ClusterError(f"request to {where} failed: {type(reason).__name__}: {reason}", fix)


def _number(text: Any) -> float:
    """A sample value as Prometheus writes it: a string ("0.5", "NaN", "+Inf")."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")
