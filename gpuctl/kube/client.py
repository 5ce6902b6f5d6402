"""Build Kubernetes API clients from a kubeconfig, translating client errors at the boundary.

Every request has a deadline (gpuctl/util/timeouts.py): connect and TLS handshake 10 s, answer 30 s,
unless its caller passes `_request_timeout`. A frozen kube-apiserver therefore ends a command with
exit 7 and a refused connection with exit 5, each naming the server's URL.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from gpuctl.util import redact
from gpuctl.util.errors import ClusterError, CredentialsError, GpuctlError, RequestTimeout, UsageError, WaitTimeout
from gpuctl.util.errors import shown
from gpuctl.util.timeouts import ENV, Deadlines, request_deadlines

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration, CoreV1Api


POOL_SIZE = 32  # concurrent node patches share one client
# The kubeconfig's user is refused: an EKS token signed with wrong AWS credentials, an expired or
# revoked client certificate or token.
UNAUTHORIZED_FIX = ("check the credentials of the kubeconfig context: on EKS the AWS credentials its token is signed "
                    "with ('aws sts get-caller-identity'); elsewhere rerun 'gpuctl cluster create' to renew them")
CONNECT_RETRIES = 2  # a refused connection is retried at once, twice; a request that timed out is not


def api_client(kubeconfig: Path | None = None, context: str | None = None,
               config_dict: dict[str, Any] | None = None) -> ApiClient:
    """An ApiClient for `context` in `kubeconfig` (default: $KUBECONFIG or ~/.kube/config), or in the
    kubeconfig document `config_dict`; its requests have deadlines and its credentials are registered
    for redaction."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from gpuctl import __version__

    if config_dict is None:  # read strictly first: a hostile file is a usage error (exit 2), not a crash
        from gpuctl.kube.kubeconfig import read_kubeconfig, read_paths

        if kubeconfig is not None and not kubeconfig.exists():
            raise UsageError("--kubeconfig", f"{shown(str(kubeconfig))} does not exist",
                             "pass the kubeconfig gpuctl wrote (cluster create), or leave the flag out")
        for path in read_paths(kubeconfig):
            if path.exists():
                read_kubeconfig(path)
    configuration = client.Configuration()
    try:
        if config_dict is not None:
            config.load_kube_config_from_dict(config_dict, context=context, client_configuration=configuration,
                                              persist_config=False)
        else:
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError) as exc:
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
    once (GET only, as urllib3 does), never a connection or a request that timed out (urllib3's
    default would try such a GET three more times: a frozen server would hold gpuctl four deadlines)."""
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ReadTimeoutError
    from urllib3.util.retry import Retry

    class NoRetryOnTimeout(Retry):
        def increment(self, method: Any = None, url: Any = None, response: Any = None, error: Any = None,
                      _pool: Any = None, _stacktrace: Any = None) -> Retry:
            timed_out = isinstance(error, (ReadTimeoutError, ConnectTimeoutError))
            if timed_out and not isinstance(error, NewConnectionError):  # (a subclass, for a refusal)
                raise MaxRetryError(_pool, url, error) from error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return NoRetryOnTimeout(total=CONNECT_RETRIES, connect=CONNECT_RETRIES, read=1, status=0, other=0,
                            backoff_factor=0.1, raise_on_status=False)


def _register_credentials(configuration: Configuration) -> None:
    """The kubeconfig's bearer token, password and client key: never printed, whatever a server echoes."""

    def register(cfg: Any) -> None:
        header = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken") or ""
        scheme, _, value = header.strip().partition(" ")
        redact.register(value or scheme, cfg.password)
        if scheme.lower() == "basic":  # username:password, base64
            import base64
            import binascii

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
    """kubernetes' ApiClient with a REST layer that adds the deadlines and translates transport errors.

    Built on first use, so importing gpuctl never imports the kubernetes package.
    """
    global _TIMED_CLIENT
    if _TIMED_CLIENT is not None:
        return _TIMED_CLIENT
    from kubernetes.client import ApiClient as BaseApiClient
    from kubernetes.client.rest import RESTClientObject
    from urllib3.exceptions import HTTPError

    class TimedRESTClient(RESTClientObject):
        def __init__(self, configuration: Any, deadlines: Deadlines) -> None:
            super().__init__(configuration)
            self.server = configuration.host
            self.deadlines = deadlines

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("_request_timeout") is None:
                kwargs["_request_timeout"] = request_timeout(url, self.deadlines)
            started = time.monotonic()
            try:
                return super().request(method, url, *args, **kwargs)
            except HTTPError as exc:
                raise transport_error(exc, self.server, time.monotonic() - started,
                                      f"{method} {urlsplit(url).path}") from None

    class TimedApiClient(BaseApiClient):
        """Every request gets the default deadlines unless its caller passed `_request_timeout`."""

        def __init__(self, configuration: Any, deadlines: Deadlines) -> None:
            super().__init__(configuration)
            self.rest_client = TimedRESTClient(configuration, deadlines)  # the replaced one never connected

    _TIMED_CLIENT = TimedApiClient
    return TimedApiClient


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
                    request: str = "") -> GpuctlError:
    """A urllib3 error (no HTTP answer at all) as a gpuctl error naming the server: a timeout exits 7,
    a refused or dropped connection 5."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    reason = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    server = server or _server_of(reason) or _server_of(exc) or "the kube-apiserver"
    what = f"the kube-apiserver at {server}"
    # NewConnectionError subclasses ConnectTimeoutError in urllib3: test it first.
    if isinstance(reason, NewConnectionError):
        cause = str(reason).split(": ", 1)[-1] if ": " in str(reason) else type(reason).__name__
        return ClusterError(f"cannot connect to {what}: {cause}",
                            "check that the cluster is running and that --kubeconfig/--context point at it")
    if isinstance(reason, Urllib3Timeout):
        took = f"{elapsed:.0f}s" if elapsed is not None else f"{request_deadlines().read:.0f}s"
        return RequestTimeout(f"{what} did not answer{' ' + request if request else ''} within {took}",
                              f"check that the API server is up and reachable (request deadline: {ENV}, "
                              f"default {request_deadlines().read:.0f}s)", server=server)
    if isinstance(reason, ProtocolError):
        return ClusterError(f"{what} dropped the connection{' on ' + request if request else ''}: "
                            f"{reason.args[0] if reason.args else type(reason).__name__}")
    return ClusterError(f"request to {what} failed: {type(reason).__name__}: {reason}")


def core(client: ApiClient) -> CoreV1Api:
    from kubernetes.client import CoreV1Api

    return CoreV1Api(client)


def is_not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


def api_error(exc: Exception, doing: str) -> GpuctlError:
    """A one-line gpuctl error from a kubernetes ApiException, a transport error (urllib3, or the
    gpuctl error the client already made of one), or anything else a call raised."""
    if isinstance(exc, GpuctlError):
        made = type(exc).__new__(type(exc))
        made.__dict__.update(exc.__dict__)
        made.message = f"{doing} failed: {exc.message}"
        made.args = (made.message,)
        return made
    from urllib3.exceptions import HTTPError

    if isinstance(exc, HTTPError):
        return api_error(transport_error(exc, None), doing)
    reason = getattr(exc, "reason", None) or type(exc).__name__
    if getattr(exc, "status", None) == 401:  # the server does not know who we are: the credentials are wrong
        return CredentialsError(f"{doing} failed: the Kubernetes API rejected the credentials (HTTP 401)",
                                UNAUTHORIZED_FIX)
    body = getattr(exc, "body", None)
    if isinstance(body, (str, bytes)) and body:
        import json

        try:
            reason = json.loads(body).get("message", reason)
        except ValueError:
            pass
    return ClusterError(f"{doing} failed: {reason}")


def wait_for_api(client: ApiClient, timeout: float) -> None:
    """Block until the API serves reads and the controller-manager has made the default
    ServiceAccount (pods cannot be created before it exists).

    A refused connection or an error answer means "not up yet"; a server that takes the
    connection and gives no answer within the request deadline is frozen, and raises at once."""
    from gpuctl.util.progress import waiting

    server = client.configuration.host
    deadline = time.monotonic() + timeout
    last: Any = None
    v1 = core(client)
    with waiting(f"the kube-apiserver at {server}", timeout) as wait:
        while time.monotonic() < deadline:
            try:
                v1.read_namespaced_service_account("default", "default")
                return
            except RequestTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - anything else here means "not ready yet"
                last = exc
            wait.update(_not_ready(last))
            time.sleep(0.5)
    raise WaitTimeout(f"the kube-apiserver at {server} not ready after {timeout:.0f}s ({_not_ready(last)})")


def _not_ready(exc: Any) -> str:
    if isinstance(exc, GpuctlError):  # the server is named already: its last words are the reason
        return exc.message.rsplit(": ", 1)[-1]
    if is_not_found(exc):
        return "no default ServiceAccount yet"
    return getattr(exc, "reason", None) or type(exc).__name__
