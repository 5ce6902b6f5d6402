"""Magnum's REST API through openstacksdk's authenticated proxy, with errors translated here.

openstacksdk has no node groups, so every call goes through
`conn.container_infrastructure_management` (a keystoneauth Adapter on the catalog's
container-infra endpoint) with the microversion header that node groups need (>= 1.9).
openstacksdk and keystoneauth are imported only when a connection is made.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuctl import redact
from gpuctl.errors import CloudError, CredentialsError, GpuctlError, NotFound, RequestTimeout, WaitTimeout
from gpuctl.output import info
from gpuctl.timeouts import CLOUD_ATTEMPTS, ENV, request_deadlines

if TYPE_CHECKING:
    from openstack.connection import Connection

MICROVERSION = {"OpenStack-API-Version": "container-infra 1.10"}
THROTTLE_RETRIES = 4  # 429/503 are retried by keystoneauth with exponential backoff (0.5s, 1s, 2s, 4s)
# Statuses a cluster or node group can be used (and converged) in: an UPDATE_FAILED one still
# runs, and a re-run retries the change that failed.
USABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_FAILED")
CREDENTIALS_HINT = ("set OS_CLOUD or pass --os-cloud NAME (an entry of clouds.yaml), or export the OS_* variables "
                    "of an openrc file")
POLL_START_S, POLL_MAX_S, PROGRESS_EVERY_S = 1.0, 5.0, 30.0

Json = dict[str, Any]


def describe_cloud(os_cloud: str | None) -> str:
    """How the user chose the cloud, for messages (never the credentials themselves)."""
    if os_cloud:
        return f"cloud {os_cloud!r}"
    if env := os.environ.get("OS_CLOUD"):
        return f"cloud {env!r} (OS_CLOUD)"
    return "the OS_* environment variables"


def connect(os_cloud: str | None, region: str | None) -> Connection:
    """A Connection from clouds.yaml / OS_CLOUD / OS_* through openstacksdk's own config loader.

    Every request (Keystone's included) has the request deadline (keystoneauth's session timeout, for
    connect and read alike) and is tried CLOUD_ATTEMPTS times when the connection fails or times out.
    The password, application-credential secret or token of the config are registered for redaction.
    """
    import keystoneauth1.exceptions as ka
    import openstack
    from openstack import exceptions as sdk

    try:
        conn = openstack.connect(cloud=os_cloud, api_timeout=request_deadlines().read,
                                 connect_retries=CLOUD_ATTEMPTS - 1, **({"region_name": region} if region else {}))
    except (sdk.ConfigException, ka.ClientException) as exc:
        raise CredentialsError(f"OpenStack configuration of {describe_cloud(os_cloud)} is unusable: "
                               f"{redact.redact(str(exc))}", CREDENTIALS_HINT) from None
    auth = conn.config.config.get("auth") or {}
    redact.register(*(auth.get(k) for k in ("password", "application_credential_secret", "token")))
    return conn


def _detail(body: str) -> str:
    """The message of a Magnum ({"errors": [...]}) or Keystone ({"error": {...}}) error body."""
    try:
        doc = json.loads(body)
    except ValueError:
        return " ".join(body.split())[:200] or "no details"
    if isinstance(doc, dict) and isinstance(doc.get("errors"), list) and doc["errors"]:
        first = doc["errors"][0]
        return str(first.get("detail") or first.get("title") or first)
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return str(doc["error"].get("message") or doc["error"].get("title"))
    return " ".join(body.split())[:200]


def http_error(status: int, body: str, doing: str, hint: str | None = None) -> GpuctlError:
    """Translate an HTTP error of Magnum into gpuctl's error kinds (exit 3, 2 or 4)."""
    detail = _detail(body)
    if status == 401:
        return CredentialsError(f"{doing}: OpenStack rejected the credentials (HTTP 401: {detail})", CREDENTIALS_HINT)
    if status == 403:
        return CredentialsError(f"{doing}: not allowed (HTTP 403: {detail})",
                                "the project needs a role that may use Magnum; ask your OpenStack administrators")
    if status == 404:
        return NotFound(f"{doing}: {detail}", hint)
    if status in (429, 503):
        return CloudError(f"{doing}: Magnum is throttling or unavailable (HTTP {status}: {detail}), still after "
                          f"{THROTTLE_RETRIES} retries", "try again in a few minutes")
    return CloudError(f"{doing} failed: {detail} (HTTP {status})", hint)


def sdk_error(exc: Exception, doing: str) -> GpuctlError:
    """Translate keystoneauth / openstacksdk exceptions (no HTTP response to read)."""
    import keystoneauth1.exceptions as ka
    from openstack import exceptions as sdk

    if isinstance(exc, ka.Unauthorized):
        return CredentialsError(f"{doing}: OpenStack rejected the credentials (HTTP 401)", CREDENTIALS_HINT)
    if isinstance(exc, (ka.AuthorizationFailure, ka.AuthPluginException)):
        return CredentialsError(f"{doing}: cannot authenticate: {exc}", CREDENTIALS_HINT)
    if isinstance(exc, ka.ConnectTimeout):  # keystoneauth's name for any requests timeout, connect or read
        return RequestTimeout(f"{doing}: {exc} (no answer within {request_deadlines().read:.0f}s, "
                              f"{CLOUD_ATTEMPTS} attempts)",
                              f"check auth_url, the network path to OpenStack (request deadline: {ENV})")
    if isinstance(exc, (ka.EndpointNotFound, sdk.ServiceDisabledException)):
        return CloudError(f"{doing}: this cloud has no Magnum (container-infra) endpoint: {exc}",
                          "check --region / region_name, or ask whether Magnum is deployed")
    return CloudError(f"{doing}: {type(exc).__name__}: {exc}", "check auth_url and the network path to OpenStack")


class MagnumApi:
    """Magnum v1 calls; every method raises gpuctl errors, never SDK exceptions."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def _proxy(self) -> Any:
        # Made on first use, which authenticates and discovers versions: use it inside _guarded.
        return self._conn.container_infrastructure_management

    def _guarded(self, action: Callable[[], Any], doing: str) -> Any:
        import keystoneauth1.exceptions as ka
        from openstack import exceptions as sdk

        try:
            return action()
        except (ka.ClientException, sdk.SDKException) as exc:
            self._register_token()
            raise sdk_error(exc, doing) from None

    def _register_token(self) -> None:
        """The Keystone token in use (cached by keystoneauth: no request), for redaction."""
        auth_ref = getattr(getattr(self._conn.session, "auth", None), "auth_ref", None)
        redact.register(getattr(auth_ref, "auth_token", None))

    def authenticate(self) -> None:
        """Get a token and find the Magnum endpoint: proves the credentials before anything is touched."""
        redact.register(self._guarded(self._conn.session.get_token, "authenticating to OpenStack"))
        self._guarded(lambda: self._proxy.get_endpoint(), "finding Magnum")

    def _call(self, method: str, path: str, doing: str, body: Any = None, hint: str | None = None,
              log: bool = True, absent_ok: bool = False) -> Any:
        resp = self._guarded(lambda: self._proxy.request(path, method, json=body, headers=MICROVERSION,
                                                         raise_exc=False, status_code_retries=THROTTLE_RETRIES,
                                                         log=log), doing)
        if absent_ok and resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            self._register_token()
            raise http_error(resp.status_code, resp.text, doing, hint)
        return resp.json() if resp.content else None

    # -- clusters --------------------------------------------------------------------------

    def get_cluster(self, ident: str) -> Json | None:
        return self._call("GET", f"/clusters/{quote(ident, safe='')}", f"reading cluster {ident!r}", absent_ok=True)

    def list_clusters(self) -> list[Json]:
        return self._call("GET", "/clusters", "listing clusters")["clusters"]

    def create_cluster(self, body: Json) -> str:
        doing = f"creating cluster {body['name']!r}"
        hint = "see 'openstack coe cluster template list' for the templates"
        return self._call("POST", "/clusters", doing, body, hint)["uuid"]

    def delete_cluster(self, uuid: str, name: str) -> None:
        self._call("DELETE", f"/clusters/{uuid}", f"deleting cluster {name!r}")

    def resize(self, uuid: str, nodegroup: str, node_count: int) -> None:
        self._call("POST", f"/clusters/{uuid}/actions/resize", f"resizing node group {nodegroup!r}",
                   {"node_count": node_count, "nodegroup": nodegroup})

    # -- node groups -----------------------------------------------------------------------

    def list_nodegroups(self, uuid: str) -> list[Json]:
        return self._call("GET", f"/clusters/{uuid}/nodegroups", "listing node groups")["nodegroups"]

    def get_nodegroup(self, uuid: str, name: str) -> Json | None:
        return self._call("GET", f"/clusters/{uuid}/nodegroups/{quote(name, safe='')}",
                          f"reading node group {name!r}", absent_ok=True)

    def create_nodegroup(self, uuid: str, body: Json) -> Json:
        return self._call("POST", f"/clusters/{uuid}/nodegroups", f"creating node group {body['name']!r}", body,
                          "see 'openstack flavor list' for the flavors; --flavor overrides the GPU's default")

    def update_nodegroup(self, uuid: str, name: str, changes: dict[str, int | None]) -> None:
        patch = [{"op": "replace", "path": f"/{k}", "value": v} for k, v in changes.items()]
        self._call("PATCH", f"/clusters/{uuid}/nodegroups/{quote(name, safe='')}", f"updating node group {name!r}",
                   patch)

    def delete_nodegroup(self, uuid: str, name: str) -> None:
        self._call("DELETE", f"/clusters/{uuid}/nodegroups/{quote(name, safe='')}", f"deleting node group {name!r}")

    # -- certificates (never logged: the signed certificate is a credential) -----------------

    def ca_pem(self, uuid: str) -> bytes:
        doc = self._call("GET", f"/certificates/{uuid}", "reading the cluster CA", log=False)
        return doc["pem"].encode()

    def sign(self, uuid: str, csr: str) -> str:
        doc = self._call("POST", "/certificates", "signing the client certificate",
                         {"cluster_uuid": uuid, "csr": csr}, log=False)
        return doc["pem"]


def is_busy(status: str) -> bool:
    return status.endswith("_IN_PROGRESS")


def wait_for_status(read: Callable[[], Json | None], what: str, goal: Collection[str] | None, timeout: float,
                    cleanup: str) -> Json | None:
    """Poll `read` until the object leaves *_IN_PROGRESS; its status must then be in `goal` (None: gone).

    Progress goes to stderr when the status changes and every PROGRESS_EVERY_S. Any other end
    (CREATE_FAILED...) raises CloudError with Magnum's status_reason and the command that cleans up.
    """
    started = time.monotonic()
    delay, last, said = POLL_START_S, None, started
    while True:
        current = read()
        status = current["status"] if current else None
        elapsed = time.monotonic() - started
        if status is None or not is_busy(status):
            break
        if status != last or time.monotonic() - said >= PROGRESS_EVERY_S:
            info(f"waiting for {what}: {status} ({elapsed:.0f}s of {timeout:.0f}s)")
            last, said = status, time.monotonic()
        if elapsed > timeout:
            raise WaitTimeout(f"{what} still {status} after {timeout:.0f}s", cleanup)
        time.sleep(delay)
        delay = min(delay * 1.5, POLL_MAX_S)
    if current is None:
        if goal is None:
            return None
        raise CloudError(f"{what} was deleted while gpuctl waited for it", "create it again")
    if goal is not None and status in goal:
        return current
    reason = current.get("status_reason") or "Magnum gave no reason"
    raise CloudError(f"{what} is {status}: {reason}", cleanup)
