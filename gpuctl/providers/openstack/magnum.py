"""Magnum's REST API through openstacksdk's authenticated proxy, with errors translated here.

openstacksdk has no node groups, so every call goes through
`conn.container_infrastructure_management` (a keystoneauth Adapter on the catalog's
container-infra endpoint) with the microversion header. The microversion is negotiated once per
connection from Magnum's root document (magnum/api/controllers/root.py: `versions[].min_version`,
`max_version`): the highest of both sides, at least 1.10 (node groups of 0 nodes), at most 1.14
(node groups carry `node_labels` and `node_taints`). openstacksdk and keystoneauth are imported
only when a connection is made.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuctl.util import redact
from gpuctl.util.errors import CloudError, CredentialsError, GpuctlError, NotFound, RequestTimeout, UsageError
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.timeouts import CLOUD_ATTEMPTS, ENV, request_deadlines

if TYPE_CHECKING:
    import keystoneauth1.exceptions as ka
    import openstack
    import openstack.exceptions as sdk
    from openstack.connection import Connection
else:
    ka = LazyImport("keystoneauth1.exceptions", "keystoneauth1")
    openstack = LazyImport("openstack", "openstacksdk")
    sdk = LazyImport("openstack.exceptions", "openstacksdk")

# The service name every Magnum accepts in OpenStack-API-Version (newer ones also take
# container-infrastructure[-management]; older ones answer 406 to those).
SERVICE = "container-infra"
NEEDED, NEWEST = (1, 10), (1, 14)
NODE_ATTRS = (1, 14)  # node_labels and node_taints on node groups
THROTTLE_RETRIES = 4  # 429/503 are retried by keystoneauth with exponential backoff (0.5s, 1s, 2s, 4s)
# Statuses a cluster or node group can be used (and converged) in: an UPDATE_FAILED one still
# runs, and a re-run retries the change that failed.
USABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_FAILED")
CREDENTIALS_HINT = ("set OS_CLOUD or pass --os-cloud NAME (an entry of clouds.yaml), or export the OS_* variables "
                    "of an openrc file")
# Magnum's 400s for a resource already busy (exception.OperationInProgress, NgOperationInProgress), and
# its 409 for a node group on a cluster still being made (exception.ClusterAPIAddressUnavailable).
BUSY = ("already has an operation in progress", "api address is not available yet")
# Magnum cannot show a cluster that has no node groups (its API type's master_count has a minimum of 1, and the
# count comes from the master node group: magnum/api/controllers/v1/cluster.py Cluster, objects/cluster.py as_dict).
# A GET of such a cluster, and any listing that holds it, answers 400 between the conductor writing a new cluster's
# row and its default node groups (conductor/handlers/cluster_conductor.py cluster_create), and between the
# periodic job destroying a deleted cluster's node groups and its row (service/periodic.py). A read outside a
# create or delete of gpuctl's own waits that window out, for up to NO_NODE_GROUPS_S.
NO_NODE_GROUPS = "field/attribute master_count"
NO_NODE_GROUPS_S = 10.0

Json = dict[str, Any]
Version = tuple[int, int]


def version_text(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: object) -> Version | None:
    parts = str(text or "").split(".")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def negotiate(root: Json | None, headers: dict[str, str]) -> Version:
    """The microversion to speak: the highest both gpuctl and this Magnum support.

    From the root document's v1 entry, else the OpenStack-API-Minimum/Maximum-Version headers
    every Magnum answer carries; a Magnum that says neither is spoken to at NEEDED.
    """
    low = high = None
    for entry in (root or {}).get("versions") or []:
        if isinstance(entry, dict) and entry.get("id") == "v1":
            low, high = parse_version(entry.get("min_version")), parse_version(entry.get("max_version"))
    low = low or parse_version(headers.get("OpenStack-API-Minimum-Version", "").split(" ")[-1])
    high = high or parse_version(headers.get("OpenStack-API-Maximum-Version", "").split(" ")[-1])
    if high is None:
        return NEEDED
    if high < NEEDED or (low is not None and low > NEWEST):
        raise CloudError(f"this Magnum serves API microversions {version_text(low) if low else '?'} to "
                         f"{version_text(high)}; gpuctl needs one from {version_text(NEEDED)} to "
                         f"{version_text(NEWEST)} (node groups)", "ask your OpenStack administrators to upgrade Magnum")
    return min(high, NEWEST)


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
    try:
        where: dict[str, Any] = {"region_name": region} if region else {}
        conn = openstack.connect(cloud=os_cloud, api_timeout=request_deadlines().read,
                                 connect_retries=CLOUD_ATTEMPTS - 1, **where)
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


def refused_field(detail: str, default: str) -> str:
    """The flag behind the input Magnum refused, from its reason (exception.*NotFound, NGResizeOutBounds...)."""
    text = detail.lower()
    for words, flag in ((("outside the allowed range",), "--nodes"), (("flavor",), "--flavor"),
                        (("keypair",), "--keypair"),
                        (("min_node_count",), "--min-nodes"), (("max_node_count",), "--max-nodes"),
                        (("node_taints",), "--taint"), (("image", "os_distro", "network", "template"), "--template")):
        if any(word in text for word in words):
            return flag
    return default


def http_error(status: int, body: str, doing: str, hint: str | None = None, field: str | None = None) -> GpuctlError:
    """Translate an HTTP error of Magnum into gpuctl's error kinds, with Magnum's reason.

    401 (Keystone's format, from keystonemiddleware) and a 403 policy refusal exit 3; a 403 quota
    (exception.ResourceLimitExceeded) exits 4; 404 exits 2. A 400 or 409 refusing an input the
    user gave (`field`: bad flavor, bounds (NodeGroupInvalidInput is 409)...) exits 2 naming the flag;
    a busy resource, a 406 (microversion), throttling and everything else exit 4.
    """
    detail = _detail(body)
    if status == 401:
        return CredentialsError(f"{doing}: OpenStack rejected the credentials (HTTP 401: {detail})", CREDENTIALS_HINT)
    if status == 403 and "limit exceeded" in detail.lower():
        return CloudError(f"{doing}: {detail} (HTTP 403)", "delete clusters you no longer need, or ask for more quota")
    if status == 403:
        return CredentialsError(f"{doing}: not allowed (HTTP 403: {detail})",
                                "the project needs a role that may use Magnum; ask your OpenStack administrators")
    if status == 404:
        return NotFound(f"{doing}: {detail}", hint)
    if status == 406:
        return CloudError(f"{doing}: Magnum refused the API version (HTTP 406: {detail})",
                          "this Magnum does not speak the microversion gpuctl negotiated; rerun, or ask your "
                          "OpenStack administrators which Magnum version runs")
    if status in (400, 409) and any(reason in detail.lower() for reason in BUSY):
        return CloudError(f"{doing}: {detail} (HTTP {status})", "wait until it finishes, then rerun")
    if status in (400, 409) and field is not None:
        return UsageError(refused_field(detail, field), f"Magnum refused it: {detail} (HTTP {status})", hint)
    if status in (429, 503):
        return CloudError(f"{doing}: Magnum is throttling or unavailable (HTTP {status}: {detail}), still after "
                          f"{THROTTLE_RETRIES} retries", "try again in a few minutes")
    return CloudError(f"{doing} failed: {detail} (HTTP {status})", hint)


def cannot_show(resp: Any) -> bool:
    """Whether Magnum's answer is its 400 for a cluster without node groups (NO_NODE_GROUPS)."""
    return bool(resp.status_code == 400 and NO_NODE_GROUPS in resp.text)


def sdk_error(exc: Exception, doing: str) -> GpuctlError:
    """Translate keystoneauth / openstacksdk exceptions (no HTTP response to read)."""
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
        self._version: Version | None = None

    @property
    def _proxy(self) -> Any:
        # Made on first use, which authenticates and discovers versions: use it inside _guarded.
        return self._conn.container_infrastructure_management

    def _guarded(self, action: Callable[[], Any], doing: str) -> Any:
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
        """Get a token, find Magnum and agree on a microversion: proves the credentials before anything is touched."""
        redact.register(self._guarded(self._conn.session.get_token, "authenticating to OpenStack"))
        self._guarded(lambda: self._proxy.get_endpoint(), "finding Magnum")
        self.microversion()

    def scope(self) -> str:
        """The Magnum endpoint and project this connection works in (names are unique only per project)."""
        return self._guarded(lambda: f"{self._proxy.get_endpoint()} {self._conn.current_project_id}", "finding Magnum")

    def microversion(self) -> Version:
        """The negotiated microversion (one request, on first use)."""
        if self._version is None:
            endpoint = str(self._guarded(lambda: self._proxy.get_endpoint(), "finding Magnum")).rstrip("/")
            root = endpoint.removesuffix("/v1") + "/"
            resp = self._guarded(lambda: self._proxy.request(root, "GET", raise_exc=False,
                                                             status_code_retries=THROTTLE_RETRIES),
                                 "reading Magnum's API versions")
            if resp.status_code == 401:
                raise http_error(401, resp.text, "reading Magnum's API versions")
            try:
                doc = resp.json() if resp.ok else None
            except ValueError:
                doc = None
            self._version = negotiate(doc if isinstance(doc, dict) else None, dict(resp.headers))
        return self._version

    @property
    def takes_node_attrs(self) -> bool:
        """Whether node groups carry node_labels and node_taints (Magnum then sets them on every node)."""
        return self.microversion() >= NODE_ATTRS

    def _request(self, method: str, path: str, doing: str, body: Any = None, log: bool = True) -> Any:
        headers = {"OpenStack-API-Version": f"{SERVICE} {version_text(self.microversion())}"}
        return self._guarded(lambda: self._proxy.request(path, method, json=body, headers=headers, raise_exc=False,
                                                         status_code_retries=THROTTLE_RETRIES, log=log), doing)

    def _read(self, path: str, doing: str, log: bool = True, wait: bool = True) -> Any:
        """GET `path`; with `wait`, read again while Magnum cannot show a cluster in it (NO_NODE_GROUPS), up to
        NO_NODE_GROUPS_S: the conductor or the periodic job closes that window within moments."""
        deadline, delay = time.monotonic() + NO_NODE_GROUPS_S, 0.1
        while True:
            resp = self._request("GET", path, doing, log=log)
            if not wait or not cannot_show(resp) or time.monotonic() > deadline:
                return resp
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _call(self, method: str, path: str, doing: str, body: Any = None, hint: str | None = None,
              log: bool = True, absent_ok: bool = False, field: str | None = None) -> Any:
        resp = self._read(path, doing, log) if method == "GET" else self._request(method, path, doing, body, log)
        if absent_ok and resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            self._register_token()
            raise http_error(resp.status_code, resp.text, doing, hint, field)
        return resp.json() if resp.content else None

    def _get_named(self, path: str, ident: str, kind: str, listing: Callable[[], list[Json]],
                   where: str, in_flux: bool = False) -> Json | None:
        """GET by name or uuid; Magnum answers 409 when several records share the name. A record `in_flux`
        (being created or deleted) that Magnum cannot show (NO_NODE_GROUPS) is None at once: not there."""
        doing = f"reading {kind} {ident!r}"
        resp = self._read(path, doing, wait=not in_flux)
        if in_flux and cannot_show(resp):
            return None
        if resp.status_code == 409:
            uuids = sorted(item["uuid"] for item in listing() if item.get("name") == ident)
            raise UsageError("--name" if kind == "cluster" else "--nodegroup-name",
                             f"{len(uuids) or 'several'} Magnum {kind}s are named {ident!r}{where} "
                             f"({', '.join(uuids)})", f"Magnum allows duplicate names: delete the extra {kind} with "
                             f"'openstack coe {kind.replace(' ', '')} delete' and its uuid, then rerun")
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            self._register_token()
            raise http_error(resp.status_code, resp.text, doing)
        return resp.json()

    # -- clusters --------------------------------------------------------------------------

    def get_cluster(self, ident: str, in_flux: bool = False) -> Json | None:
        """The cluster record; None when there is none. `in_flux` (a create or delete gpuctl waits for) takes a
        cluster Magnum cannot show (NO_NODE_GROUPS) for "not there": not visible yet, or gone; other reads wait
        that window out."""
        return self._get_named(f"/clusters/{quote(ident, safe='')}", ident, "cluster", self.list_clusters, "",
                               in_flux)

    def list_clusters(self) -> list[Json]:
        return self._call("GET", "/clusters", "listing clusters")["clusters"]

    def create_cluster(self, body: Json) -> str:
        doing = f"creating cluster {body['name']!r}"
        hint = "see 'openstack coe cluster template list', 'openstack flavor list' and 'openstack keypair list'"
        return self._call("POST", "/clusters", doing, body, hint, field="--template")["uuid"]

    def delete_cluster(self, uuid: str, name: str) -> None:
        self._call("DELETE", f"/clusters/{uuid}", f"deleting cluster {name!r}")

    def resize(self, uuid: str, nodegroup: str, node_count: int) -> None:
        self._call("POST", f"/clusters/{uuid}/actions/resize", f"resizing node group {nodegroup!r}",
                   {"node_count": node_count, "nodegroup": nodegroup}, field="--nodes")

    # -- node groups -----------------------------------------------------------------------

    def list_nodegroups(self, uuid: str) -> list[Json]:
        return self._call("GET", f"/clusters/{uuid}/nodegroups", "listing node groups")["nodegroups"]

    def get_nodegroup(self, uuid: str, name: str) -> Json | None:
        return self._get_named(f"/clusters/{uuid}/nodegroups/{quote(name, safe='')}", name, "node group",
                               lambda: self.list_nodegroups(uuid), f" in cluster {uuid}")

    def create_nodegroup(self, uuid: str, body: Json) -> Json:
        return self._call("POST", f"/clusters/{uuid}/nodegroups", f"creating node group {body['name']!r}", body,
                          "see 'openstack flavor list' for the flavors; --flavor overrides the GPU's default",
                          field="--gpu")

    def update_nodegroup(self, uuid: str, name: str, changes: Json) -> None:
        """A JSON patch of `changes`: a cleared value (None) is removed, as Magnum refuses a null
        (types.JsonPatchType.validate); node_labels and node_taints go as JSON text, the form its
        api/utils.py apply_jsonpatch parses for them."""
        patch = [{"op": "remove", "path": f"/{k}"} if v is None else
                 {"op": "replace", "path": f"/{k}", "value": v if isinstance(v, int) else json.dumps(v)}
                 for k, v in changes.items()]
        self._call("PATCH", f"/clusters/{uuid}/nodegroups/{quote(name, safe='')}", f"updating node group {name!r}",
                   patch, field="--max-nodes")

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
