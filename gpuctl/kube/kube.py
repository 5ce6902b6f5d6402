"""The one door to Kubernetes: get, list, watch, create, apply, patch and delete any object by apiVersion and kind,
as JSON (KubeObject).

Modules outside gpuctl.kube never import the kubernetes package (an import-linter contract); they take a Kube.
Requests go through the ApiClient of gpuctl/kube/client.py, so each has its deadline, its credentials redacted and
its error raised as the typed KubeApiError where it is made. A kind's REST path comes from the API server's own
discovery (`GET /apis/<group>/<version>`), read once per group version, except the built-in kinds gpuctl reads
most, named below, which cost no request: a custom resource installed after the first read is found by reading its
group version again.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuctl.kube.client import api_client, get_or_none
from gpuctl.kube.errors import KubeApiError, KubeNotFound, KubeTimeout, requesting
from gpuctl.kube.kube_object import KubeObject, kube_objects
from gpuctl.model import labels as L
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.progress import waiting

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind is served: its plural and whether its objects live in a namespace."""

    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        where = f"/namespaces/{quote(namespace, safe='')}" if self.namespaced and namespace else ""
        tail = f"/{quote(name, safe='')}" if name is not None else ""
        return f"{base}{where}/{self.plural}{tail}{'/' + subresource if subresource else ''}"


# Built-in kinds gpuctl reads and writes (their plural and scope are fixed by Kubernetes): no discovery request.
_BUILT_IN: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Node"): ("nodes", False),
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "ResourceQuota"): ("resourcequotas", True),
    ("v1", "Event"): ("events", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("resourceslices", False),
    ("resource.k8s.io/v1", "DeviceClass"): ("deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resourceclaims", True),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("resourceclaimtemplates", True),
}


class Kube:
    """A cluster's API, reached through one kubeconfig context. Thread-safe: concurrent node patches share one."""

    def __init__(self, client: Any) -> None:
        self.client = client  # the kubernetes ApiClient (gpuctl/kube/client.py), for the few callers below the door
        self._resources = {key: Resource(key[0], *value) for key, value in _BUILT_IN.items()}
        self._discovered: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None,
                config_dict: dict[str, Any] | None = None) -> Kube:
        """Kube for `context` in `kubeconfig` (default: $KUBECONFIG or ~/.kube/config), or in the document
        `config_dict` (client.api_client: deadlines, redaction, a kubeconfig selecting no cluster refused)."""
        return cls(api_client(kubeconfig, context, config_dict))

    @property
    def server(self) -> str:
        return str(self.client.configuration.host)

    # -- the kinds ---------------------------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> Resource:
        """Where `kind` is served; KubeNotFound when the server serves no such kind (a CRD not installed)."""
        key = (api_version, kind)
        found = self._resources.get(key)
        if found is None:
            self._discover(api_version, again=api_version in self._discovered)
            found = self._resources.get(key)
        if found is None:
            raise KubeNotFound(f"the server has no resource {kind} in {api_version}", request=f"discovery {kind}")
        return found

    def _discover(self, api_version: str, again: bool) -> None:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        with self._lock:
            if api_version in self._discovered and not again:
                return
            answer = self.request("GET", base, what=f"discovering {api_version}")
            for item in answer.get("resources") or ():
                if "/" not in item.get("name", ""):  # not a subresource (pods/status)
                    self._resources[(api_version, item["kind"])] = Resource(
                        api_version, item["name"], bool(item.get("namespaced")))
            self._discovered.add(api_version)

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the server serves `kind` (its CRD installed, its API group enabled)."""
        try:
            self.resource(api_version, kind)
        except KubeNotFound:
            return False
        return True

    # -- reads -------------------------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None,
            subresource: str | None = None) -> KubeObject:
        """The object; KubeNotFound where it (or its kind) does not exist."""
        where = f"{namespace}/{name}" if namespace else name
        with requesting(f"reading {kind} {where}"):
            path = self.resource(api_version, kind).path(namespace, name, subresource)
            return KubeObject(self.request("GET", path))

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> KubeObject | None:
        return get_or_none(self.get, api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
             fields: str = "", what: str | None = None) -> list[KubeObject]:
        """The objects of `kind` (in `namespace`; None: every namespace), narrowed by label and field selectors."""
        return self.list_with_version(api_version, kind, namespace, labels=labels, fields=fields, what=what)[0]

    def list_with_version(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
                          fields: str = "", what: str | None = None) -> tuple[builtins.list[KubeObject], str]:
        """list, with the list's resourceVersion (where a watch of what changes next starts)."""
        selectors = " ".join(s for s in (labels, fields) if s)
        with requesting(what or f"listing {kind}{' ' + selectors if selectors else ''}"):
            path = self.resource(api_version, kind).path(namespace)
            answer = self.request("GET", path, query={"labelSelector": labels, "fieldSelector": fields},
                                  shape="list")
            items = answer.get("items", ())  # (an empty list's items may be null)
            if not isinstance(items, list | None) or not all(isinstance(i, dict) for i in items or ()):
                raise KubeApiError(f"GET {path} answered something that is not a Kubernetes list",
                                   f"check that {self.server} is a kube-apiserver (--kubeconfig/--context)",
                                   request=f"GET {path}")
            return kube_objects(items), str((answer.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
              fields: str = "", resource_version: str = "", seconds: int = 30) -> Iterator[tuple[str, KubeObject]]:
        """The changes to `kind` after `resource_version`, as (type, object): ADDED, MODIFIED, DELETED, BOOKMARK;
        the server ends the watch after `seconds`. An ERROR event (410 Gone: the version is too old) raises
        KubeApiError with its status, so the caller lists again."""
        path = self.resource(api_version, kind).path(namespace)
        query = {"watch": "true", "labelSelector": labels, "fieldSelector": fields,
                 "resourceVersion": resource_version, "timeoutSeconds": str(seconds)}
        with requesting(f"watching {kind}"):
            response = self._call("GET", path, query=query)
            try:
                for line in response.response:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise KubeApiError(status.get("message") or "watch error", status=status.get("code"),
                                           request=f"GET {path}")
                    yield event["type"], KubeObject(event.get("object") or {})
            finally:
                response.response.release_conn()

    def log(self, name: str, namespace: str, container: str | None = None, tail_lines: int | None = None) -> str:
        path = self.resource("v1", "Pod").path(namespace, name, "log")
        query = {"container": container or "", "tailLines": str(tail_lines) if tail_lines is not None else ""}
        with requesting(f"reading the log of pod {namespace}/{name}"):
            response = self._call("GET", path, query=query)
            response.read()
            return bytes(response.data).decode(errors="replace")

    # -- writes ------------------------------------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False, subresource: str | None = None,
               name: str | None = None) -> KubeObject:
        """POST `obj`; `subresource` (with the parent's `name`): e.g. a pod's eviction."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace")
        with requesting(f"creating {obj['kind']} {meta.get('name') or meta.get('generateName') or ''}".rstrip()):
            resource = self._of(obj) if subresource is None else self.resource("v1", "Pod")
            path = resource.path(namespace, name, subresource)
            return KubeObject(self.request("POST", path, body=dict(obj), query={"dryRun": "All" if dry_run else "",
                                                                                "fieldManager": L.MANAGER}))

    def apply(self, obj: Mapping[str, Any], *, field_manager: str = L.MANAGER, force: bool = True,
              subresource: str | None = None, dry_run: bool = False, strict: bool = False) -> KubeObject:
        """Server-side apply of `obj` (its apiVersion, kind, metadata.name and namespace say where), as
        `field_manager`, forcing: gpuctl owns the fields it applies. `strict`: unknown fields are refused."""
        meta = obj["metadata"]
        with requesting(f"applying {obj['kind']} {meta['name']}"):
            path = self._of(obj).path(meta.get("namespace"), meta["name"], subresource)
            query = {"fieldManager": field_manager, "force": "true" if force else "",
                     "dryRun": "All" if dry_run else "", "fieldValidation": "Strict" if strict else ""}
            return KubeObject(self.request("PATCH", path, body=dict(obj), query=query, content_type=APPLY_PATCH))

    def patch(self, api_version: str, kind: str, name: str, patch: Any, namespace: str | None = None, *,
              content_type: str = MERGE_PATCH, subresource: str | None = None) -> KubeObject:
        """A merge patch (or `content_type`: a JSON patch's list of operations, a strategic merge patch)."""
        with requesting(f"patching {kind} {name}"):
            path = self.resource(api_version, kind).path(namespace, name, subresource)
            return KubeObject(self.request("PATCH", path, body=patch, query={"fieldManager": L.MANAGER},
                                           content_type=content_type))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, *,
               propagation: str | None = None, grace_seconds: int | None = None,
               precondition_uid: str | None = None) -> bool:
        """Delete the object; False where it was gone already. `propagation`: Foreground, Background or Orphan."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if precondition_uid:
            body["preconditions"] = {"uid": precondition_uid}
        with requesting(f"deleting {kind} {f'{namespace}/{name}' if namespace else name}"):
            try:
                self.request("DELETE", self.resource(api_version, kind).path(namespace, name), body=body)
            except KubeNotFound:
                return False
        return True

    def delete_all(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
                   fields: str = "", timeout: tuple[float, float] | None = None) -> int:
        """Delete every object of `kind` (in `namespace`) the selectors match, in one request; how many it
        deleted (the server answers with them). `timeout`: (connect, read) seconds instead of the usual."""
        with requesting(f"deleting {kind} {labels or fields}".rstrip()):
            answer = self.request("DELETE", self.resource(api_version, kind).path(namespace),
                                  query={"labelSelector": labels, "fieldSelector": fields}, timeout=timeout)
            return len(answer.get("items") or ())

    # -- the wire ----------------------------------------------------------------------------------------------

    def _of(self, obj: Mapping[str, Any]) -> Resource:
        return self.resource(obj["apiVersion"], obj["kind"])

    def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
                content_type: str = "application/json", what: str | None = None,
                shape: str = "object", timeout: tuple[float, float] | None = None) -> dict[str, Any]:
        """One request, its JSON answer ({} for none). Errors are the typed KubeApiErrors, saying `what`; an
        answer that is no JSON object is refused as not a Kubernetes `shape` (object, list). `timeout`:
        (connect, read) seconds instead of the usual deadlines."""
        with requesting(what) if what else nullcontext():
            response = self._call(method, path, body=body, query=query, content_type=content_type, timeout=timeout)
            response.read()
            if not response.data:
                return {}
            try:
                answer = json.loads(response.data)
            except ValueError:  # a proxy's page, say
                answer = None
            if not isinstance(answer, dict):
                raise KubeApiError(f"{method} {path} answered something that is not a Kubernetes {shape}",
                                   f"check that {self.server} is a kube-apiserver (--kubeconfig/--context)",
                                   request=f"{method} {path}")
            return answer

    def _call(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
              content_type: str = "application/json", timeout: tuple[float, float] | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, body, post = self.client.param_serialize(
            method, path, query_params=[(k, v) for k, v in (query or {}).items() if v], header_params=headers,
            body=body, auth_settings=["BearerToken"])
        return self.client.call_api(method, url, header_params=headers, body=body, post_params=post,
                                    _request_timeout=timeout)


def wait_for_api(kube: Kube, timeout: float) -> None:
    """Block until the API serves reads and the controller-manager has made the default
    ServiceAccount (pods cannot be created before it exists).

    A refused connection or an error answer means "not up yet"; a server that takes the
    connection and gives no answer within the request deadline is frozen, and raises at once."""
    deadline = time.monotonic() + timeout
    last: KubeApiError | None = None
    with waiting(f"the kube-apiserver at {kube.server}", timeout) as wait:
        while time.monotonic() < deadline:
            try:
                kube.get("v1", "ServiceAccount", "default", "default")
                return
            except KubeTimeout:
                raise
            except KubeApiError as exc:  # refused, or any error answer: not ready yet
                last = exc
            wait.update(_not_ready(last))
            time.sleep(0.5)
    raise WaitTimeout(f"the kube-apiserver at {kube.server} not ready after {timeout:.0f}s ({_not_ready(last)})")


def _not_ready(exc: KubeApiError | None) -> str:
    if exc is None:
        return "no answer yet"
    if isinstance(exc, KubeNotFound):
        return "no default ServiceAccount yet"
    if exc.status is not None:  # an error answer: its reason phrase ("Service Unavailable", "Forbidden")
        return exc.reason or exc.detail
    return exc.message.rsplit(": ", 1)[-1]  # no answer: the server is named already, its last words are the reason
