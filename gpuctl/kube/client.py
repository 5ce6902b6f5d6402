"""Build Kubernetes API clients from a kubeconfig: the one place Kubernetes API errors are translated.

Every request made through a client of `api_client` (any API class on it, a watch, a call with
`_preload_content=False`, the reading of its answer) raises the typed errors of gpuctl/kube/errors.py
where it is made: KubeNotFound (404), KubeConflict (409), KubeUnauthorized (401, exit 3),
KubeUnavailable (refused or dropped connection, 5xx, 429), KubeTimeout (no answer in time, exit 7),
KubeApiError for the rest (exit 5). Callers catch the one they expect (`except KubeNotFound`, or
`get_or_none`) and add what they were doing with `requesting(what)` where the message needs it.

Every request has a deadline (gpuctl/util/timeouts.py): connect and TLS handshake 10 s, answer 30 s,
unless its caller passes `_request_timeout`. A frozen kube-apiserver therefore ends a command with
exit 7 and a refused connection with exit 5, each naming the server's URL.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from gpuctl import __version__
from gpuctl.kube.errors import (
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    KubeTimeout,
    KubeUnauthorized,
    KubeUnavailable,
)
from gpuctl.kube.kubeconfig import check_selected
from gpuctl.util import redact
from gpuctl.util.errors import ClusterError, GpuctlError, UsageError, shown
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.timeouts import ENV, Deadlines, request_deadlines

# The kubernetes package (~0.3 s) and urllib3 load at a client's first use: `gpuctl render` imports this module.
if TYPE_CHECKING:
    from collections.abc import Callable

    import kubernetes.client as k8s_client
    import kubernetes.client.exceptions as k8s_exceptions
    import kubernetes.client.rest as k8s_rest
    import kubernetes.config as k8s_config
    import kubernetes.config.config_exception as k8s_config_exception
    import urllib3.exceptions as urllib3_exceptions
    import urllib3.util.retry as urllib3_retry
    from kubernetes.client import ApiClient, Configuration
else:
    k8s_client = LazyImport("kubernetes.client")
    k8s_exceptions = LazyImport("kubernetes.client.exceptions", "kubernetes")
    k8s_rest = LazyImport("kubernetes.client.rest", "kubernetes")
    k8s_config = LazyImport("kubernetes.config", "kubernetes")
    k8s_config_exception = LazyImport("kubernetes.config.config_exception", "kubernetes")
    urllib3_exceptions = LazyImport("urllib3.exceptions", "urllib3")
    urllib3_retry = LazyImport("urllib3.util.retry", "urllib3")

T = TypeVar("T")


POOL_SIZE = 32  # concurrent node patches share one client
# The kubeconfig's user is refused: an EKS token signed with wrong AWS credentials, an expired or
# revoked client certificate or token.
UNAUTHORIZED_FIX = ("check the credentials of the kubeconfig context: on EKS the AWS credentials its token is signed "
                    "with ('aws sts get-caller-identity'); elsewhere rerun 'gpuctl cluster create' to renew them")
CONNECT_RETRIES = 2  # a refused connection is retried at once, twice; a request that timed out is not
# A 429 or 503 carrying Retry-After (priority and fairness, a cache still initialising after a restart) was not
# processed: client-go retries it, any verb, after the advertised wait (rest/with_retry.go, checkWait).
RETRY_AFTER_RETRIES = 8
RETRY_AFTER_MAX_S = 2  # a server asking for longer is not waited for longer


def api_client(kubeconfig: Path | None = None, context: str | None = None,
               config_dict: dict[str, Any] | None = None) -> ApiClient:
    """An ApiClient for `context` in `kubeconfig` (default: $KUBECONFIG or ~/.kube/config), or in the
    kubeconfig document `config_dict`; its requests have deadlines and its credentials are registered
    for redaction. A kubeconfig that selects no cluster (kubeconfig.check_selected) is refused with exit 2."""
    files = ""
    if config_dict is None:  # read strictly first: a hostile file is a usage error (exit 2), not a crash
        if kubeconfig is not None and not kubeconfig.exists():
            raise UsageError("--kubeconfig", f"{shown(str(kubeconfig))} does not exist",
                             "pass the kubeconfig gpuctl wrote (cluster create), or leave the flag out")
        # No cluster selected, or a --context not there: exit 2 with the fix. The client then loads the very
        # files judged (kubernetes reads $KUBECONFIG once, when it is imported).
        files = os.pathsep.join(str(p) for p in check_selected(kubeconfig, context))
    configuration = k8s_client.Configuration()
    try:
        if config_dict is not None:
            k8s_config.load_kube_config_from_dict(config_dict, context=context, client_configuration=configuration,
                                              persist_config=False)
        else:
            k8s_config.load_kube_config(config_file=files, context=context, client_configuration=configuration,
                                    persist_config=False)
    except (k8s_config_exception.ConfigException, OSError) as exc:
        where = kubeconfig or ("the cluster's kubeconfig" if config_dict is not None else "the default kubeconfig")
        raise ClusterError(f"cannot load {where}: {redact.redact(str(exc))}", "pass --kubeconfig/--context") from None
    configuration.connection_pool_maxsize = POOL_SIZE
    configuration.retries = _retries()
    _register_credentials(configuration)
    api = _timed_client_class()(configuration, request_deadlines())
    api.user_agent = f"gpuctl/{__version__}"
    return api


def _retries() -> Any:
    """urllib3 retries: a refused connection again at once (twice), a dropped keep-alive connection
    once (GET only, as urllib3 does), a 429/503 with Retry-After after that wait (RETRY_AFTER_RETRIES),
    never a connection or a request that timed out (urllib3's default would try such a GET three more
    times: a frozen server would hold gpuctl four deadlines)."""
    class NoRetryOnTimeout(urllib3_retry.Retry):
        def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
            return has_retry_after and status_code in (429, 503) and bool(self.status)

        def parse_retry_after(self, retry_after: str) -> float:
            try:
                return super().parse_retry_after(retry_after)
            except urllib3_exceptions.InvalidHeader:  # neither seconds nor a date: the longest wait
                return RETRY_AFTER_MAX_S

        def increment(self, method: Any = None, url: Any = None, response: Any = None, error: Any = None,
                      _pool: Any = None, _stacktrace: Any = None) -> Any:  # (a Retry: urllib3 types it Self)
            timed_out = isinstance(error, (urllib3_exceptions.ReadTimeoutError, urllib3_exceptions.ConnectTimeoutError))
            if timed_out and not isinstance(error, urllib3_exceptions.NewConnectionError):  # (a subclass: a refusal)
                raise urllib3_exceptions.MaxRetryError(_pool, url, error) from error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return NoRetryOnTimeout(total=None, connect=CONNECT_RETRIES, read=1, redirect=CONNECT_RETRIES, other=0,
                            status=RETRY_AFTER_RETRIES,
                            backoff_factor=0.1, raise_on_status=False, retry_after_max=RETRY_AFTER_MAX_S)


def _register_credentials(configuration: Configuration) -> None:
    """The kubeconfig's bearer token, password and client key: never printed, whatever a server echoes."""

    def register(cfg: Any) -> None:
        header = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken") or ""
        scheme, _, value = header.strip().partition(" ")
        redact.register(value or scheme, cfg.password)
        if scheme.lower() == "basic":  # username:password, base64
            try:
                redact.register(base64.b64decode(value).decode(errors="replace").partition(":")[2])
            except (binascii.Error, ValueError):
                pass
        if cfg.key_file:
            try:
                redact.register(Path(cfg.key_file).read_text())
            except OSError:
                pass

    register(configuration)
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if hook is not None:  # exec plugins and OIDC refresh the token: the new one is a secret too

        def refreshed(cfg: Any) -> None:
            hook(cfg)
            register(cfg)

        configuration.refresh_api_key_hook = refreshed


_TIMED_CLIENT: Any = None


def _timed_client_class() -> Any:
    """kubernetes' ApiClient whose requests have the deadlines and raise gpuctl's typed errors.

    Built on first use, so importing gpuctl never imports the kubernetes package.
    """
    global _TIMED_CLIENT
    if _TIMED_CLIENT is not None:
        return _TIMED_CLIENT
    class TimedRESTClient(k8s_rest.RESTClientObject):
        """Adds the deadlines; a request without an answer, or whose answer stops, raises KubeUnavailable or
        KubeTimeout naming the server."""

        def __init__(self, configuration: Any, deadlines: Deadlines) -> None:
            super().__init__(configuration)
            self.server = configuration.host
            self.deadlines = deadlines

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("_request_timeout") is None:
                kwargs["_request_timeout"] = request_timeout(url, self.deadlines)
            started = time.monotonic()
            request = f"{method.upper()} {urlsplit(url).path}"

            def failed(exc: BaseException) -> GpuctlError:
                return transport_error(exc, self.server, time.monotonic() - started, request)

            try:
                response = super().request(method, url, *args, **kwargs)
            except (urllib3_exceptions.HTTPError, OSError) as exc:
                raise failed(exc) from None
            except k8s_exceptions.ApiException as exc:  # the REST layer's: a TLS failure (status 0), a 429 retried out
                raise http_error(exc.status, exc.reason, exc.body, exc.headers, request) from None
            response.response = _Answer(response.response, failed)
            return response

    class TimedApiClient(k8s_client.ApiClient):
        """Every request gets the default deadlines unless its caller passed `_request_timeout`, and an
        error answer raises the typed error in `call_api`, which every request passes (the API classes,
        watches, `_preload_content=False` calls)."""

        def __init__(self, configuration: Any, deadlines: Deadlines) -> None:
            super().__init__(configuration)
            self.rest_client = TimedRESTClient(configuration, deadlines)  # the replaced one never connected

        def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            response = super().call_api(method, url, *args, **kwargs)
            if not 200 <= response.status <= 299:
                response.read()
                raise http_error(response.status, response.reason, response.data, response.headers,
                                 f"{method.upper()} {urlsplit(url).path}")
            return response

        def update_params_for_auth(self, *args: Any, **kwargs: Any) -> None:
            try:  # an exec credential plugin or OIDC refresh runs here, at each request
                super().update_params_for_auth(*args, **kwargs)
            except k8s_config_exception.ConfigException as exc:
                raise KubeApiError(f"cannot get credentials for the kube-apiserver at {self.configuration.host}: "
                                   f"{redact.redact(str(exc))}",
                                   "check the kubeconfig's credentials (its exec plugin, token or certificate)",
                                   request="authentication") from None

    _TIMED_CLIENT = TimedApiClient
    return TimedApiClient


class _Answer:
    """The urllib3 response of a request, read through: a server that stops answering, or drops the connection,
    mid-answer (a long list, a watch) raises KubeTimeout or KubeUnavailable like a request with no answer."""

    def __init__(self, raw: Any, failed: Callable[[BaseException], GpuctlError]) -> None:
        self._raw = raw
        self._failed = failed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _reading(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except (urllib3_exceptions.HTTPError, OSError) as exc:
            raise self._failed(exc) from None

    @property
    def data(self) -> bytes:
        return self._reading(lambda: self._raw.data)

    def read(self, *args: Any, **kwargs: Any) -> bytes:
        return self._reading(lambda: self._raw.read(*args, **kwargs))

    def json(self) -> Any:
        return self._reading(self._raw.json)

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        return self._chunks(lambda: self._raw.stream(*args, **kwargs))

    def read_chunked(self, *args: Any, **kwargs: Any) -> Any:
        return self._chunks(lambda: self._raw.read_chunked(*args, **kwargs))

    def __iter__(self) -> Any:
        return self._chunks(lambda: iter(self._raw))

    def _chunks(self, chunks: Callable[[], Any]) -> Any:
        try:
            yield from chunks()
        except (urllib3_exceptions.HTTPError, OSError) as exc:
            raise self._failed(exc) from None


def request_timeout(url: str, deadlines: Deadlines) -> tuple[float, float]:
    """(connect, read) for one request. A watch or a followed log may be silent for as long as its
    `timeoutSeconds` asks, so its read deadline is that plus the usual one; a stream without
    `timeoutSeconds` ends after the usual read deadline of silence (callers pass their own)."""
    query = parse_qs(urlsplit(url).query)
    streaming = any(query.get(k, [""])[0].lower() in ("true", "1") for k in ("watch", "follow"))
    if streaming and query.get("timeoutSeconds", [""])[0].isdigit():
        return deadlines.connect, deadlines.read + int(query["timeoutSeconds"][0])
    return deadlines.pair


def _server_of(exc: BaseException) -> str | None:
    pool = getattr(exc, "pool", None)
    if pool is None or not getattr(pool, "host", None):
        return None
    return f"{pool.scheme}://{pool.host}:{pool.port}" if pool.port else f"{pool.scheme}://{pool.host}"


def transport_error(exc: BaseException, server: str | None, elapsed: float | None = None,
                    request: str = "") -> KubeApiError:
    """A urllib3 or socket error (no HTTP answer at all, or an answer cut short) as a typed error naming the
    server: a timeout KubeTimeout (exit 7), a refused or dropped connection KubeUnavailable (exit 5)."""
    reason = exc.reason if isinstance(exc, urllib3_exceptions.MaxRetryError) and exc.reason is not None else exc
    server = server or _server_of(reason) or _server_of(exc) or "the kube-apiserver"
    what = f"the kube-apiserver at {server}"
    # NewConnectionError subclasses ConnectTimeoutError in urllib3: test it first.
    if isinstance(reason, urllib3_exceptions.NewConnectionError):
        cause = str(reason).split(": ", 1)[-1] if ": " in str(reason) else type(reason).__name__
        return KubeUnavailable(f"cannot connect to {what}: {cause}",
                               "check that the cluster is running and that --kubeconfig/--context point at it",
                               request=request)
    if isinstance(reason, (urllib3_exceptions.TimeoutError, TimeoutError)):
        took = f"{elapsed:.0f}s" if elapsed is not None else f"{request_deadlines().read:.0f}s"
        return KubeTimeout(f"{what} did not answer{' ' + request if request else ''} within {took}",
                           f"check that the API server is up and reachable (request deadline: {ENV}, "
                           f"default {request_deadlines().read:.0f}s)", server=server, request=request)
    if isinstance(reason, (urllib3_exceptions.ProtocolError, ConnectionError)):
        return KubeUnavailable(f"{what} dropped the connection{' on ' + request if request else ''}: "
                               f"{reason.args[0] if reason.args else type(reason).__name__}", request=request)
    return KubeApiError(f"request to {what} failed: {type(reason).__name__}: {reason}", request=request)


def http_error(status: int | None, reason: str | None, body: Any, headers: Any = None,
               request: str = "") -> KubeApiError:
    """The typed error of an error answer: KubeNotFound (404), KubeConflict (409), KubeUnauthorized (401),
    KubeUnavailable (5xx, 429), else KubeApiError; its detail is the server's message (a Status object's)."""
    text = body.decode(errors="replace") if isinstance(body, (bytes, bytearray)) else (body or "")
    detail = reason or f"HTTP {status}"
    if text:
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and isinstance(answer.get("message"), str) and answer["message"]:
            detail = answer["message"]
    attrs = {"status": status, "reason": reason, "body": text, "headers": headers, "request": request}
    if status == 401:  # the server does not know who we are: the credentials are wrong
        detail = "the Kubernetes API rejected the credentials (HTTP 401)"
        return KubeUnauthorized(f"{request} failed: {detail}" if request else detail, UNAUTHORIZED_FIX,
                                detail=detail, **attrs)
    kind = {404: KubeNotFound, 409: KubeConflict, 429: KubeUnavailable}.get(status or 0)
    if kind is None:
        kind = KubeUnavailable if (status or 0) >= 500 else KubeApiError
    return kind(f"{request} failed (HTTP {status}): {detail}" if request else detail, detail=detail, **attrs)


def get_or_none(read: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """`read(*args, **kwargs)`, or None where the object (or its resource type) does not exist."""
    try:
        return read(*args, **kwargs)
    except KubeNotFound:
        return None
