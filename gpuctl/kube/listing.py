"""LISTs read as JSON, through the client's auth, deadlines and typed errors but without the kubernetes package's
API classes and models: importing those and building thousands of typed objects costs a read-only command like
`gpuctl top` most of its time on a large cluster."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import KubeApiError, requesting

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def list_items(client: ApiClient, path: str, what: str, **query: str) -> list[dict[str, Any]]:
    """The items of the LIST at `path` (e.g. /api/v1/pods) as JSON; `query`: labelSelector, fieldSelector.
    Errors name `what` (e.g. "listing pods")."""
    method, url, headers, body, post = client.param_serialize(
        "GET", path, query_params=[(k, v) for k, v in query.items() if v],
        header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    with requesting(what):
        response = client.call_api(method, url, header_params=headers, body=body, post_params=post)
        response.read()
        try:
            answer = json.loads(response.data)
        except ValueError:  # a proxy's page, say
            answer = None
        items = answer["items"] if isinstance(answer, dict) and "items" in answer else ()
        items = [] if items is None else items  # (an empty list's items may be null)
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise KubeApiError(f"GET {path} answered something that is not a Kubernetes list",
                               f"check that {client.configuration.host} is a kube-apiserver (--kubeconfig/--context)",
                               request=f"GET {path}")
        return items
