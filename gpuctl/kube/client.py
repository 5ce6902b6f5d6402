"""Build Kubernetes API clients from a kubeconfig, translating client errors at the boundary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.errors import ClusterError, WaitTimeout

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api


POOL_SIZE = 32  # concurrent node patches share one client


def api_client(kubeconfig: Path | None = None, context: str | None = None) -> ApiClient:
    """An ApiClient for `context` in `kubeconfig` (default: $KUBECONFIG or ~/.kube/config)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from gpuctl import __version__

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError) as exc:
        where = kubeconfig or "the default kubeconfig"
        raise ClusterError(f"cannot load {where}: {exc}", "pass --kubeconfig/--context") from None
    configuration.connection_pool_maxsize = POOL_SIZE
    api = client.ApiClient(configuration)
    api.user_agent = f"gpuctl/{__version__}"
    return api


def core(client: ApiClient) -> CoreV1Api:
    from kubernetes.client import CoreV1Api

    return CoreV1Api(client)


def is_not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


def api_error(exc: Exception, doing: str) -> ClusterError:
    """A one-line ClusterError from a kubernetes ApiException or connection error."""
    reason = getattr(exc, "reason", None) or type(exc).__name__
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
    ServiceAccount (pods cannot be created before it exists)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    v1 = core(client)
    while time.monotonic() < deadline:
        try:
            v1.read_namespaced_service_account("default", "default")
            return
        except Exception as exc:  # noqa: BLE001 - anything here means "not ready yet"
            last = exc
        time.sleep(0.5)
    raise WaitTimeout(f"kube-apiserver not ready after {timeout:.0f}s ({type(last).__name__})")
