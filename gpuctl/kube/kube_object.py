"""A Kubernetes object as the API server sends it: JSON, with a few typed accessors.

The object is the JSON itself (a dict), so `obj["spec"]["taints"]` reads what the API defines; the accessors name
the fields every object has (kr8s's `APIObject` with `.name` and `.labels` is the model). gpuctl reads the
cluster in this one form: the kubernetes package's typed models cost a thousand-node read most of its time and
type every field Optional, even those the API server always sets.
"""

from __future__ import annotations

from typing import Any


class KubeObject(dict[str, Any]):
    """One object (a Node, a Pod, a ClusterQueue ...) as JSON."""

    @property
    def api_version(self) -> str:
        return str(self.get("apiVersion") or "")

    @property
    def kind(self) -> str:
        return str(self.get("kind") or "")

    @property
    def metadata(self) -> dict[str, Any]:
        return self.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str | None:
        return self.metadata.get("namespace")

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.get("annotations") or {}

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion") or "")

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def deleting(self) -> bool:
        """The server set a deletionTimestamp: the object goes once its finalizers are done."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def spec(self) -> dict[str, Any]:
        return self.get("spec") or {}

    @property
    def status(self) -> dict[str, Any]:
        return self.get("status") or {}

    def at(self, *path: str, default: Any = None) -> Any:
        """The value at a path of keys (`obj.at("status", "allocatable")`), or `default` where a key is missing."""
        value: Any = self
        for key in path:
            if not isinstance(value, dict) or key not in value or value[key] is None:
                return default
            value = value[key]
        return value

    def matches(self, selector: str) -> bool:
        """True when the labels satisfy `selector`, an equality-based label selector ("app=x,tier=y"): the
        filter a LIST with labelSelector applies, for objects read from a cache (kube/informer.py)."""
        labels = self.labels
        for term in filter(None, selector.split(",")):
            key, sep, value = term.partition("=")
            if not sep or "!" in key:
                raise ValueError(f"not an equality-based label selector: {selector!r}")
            if labels.get(key.strip()) != value.strip():
                return False
        return True

    def condition(self, kind: str) -> dict[str, Any] | None:
        """The status condition of this type ("Ready", "QuotaReserved"), or None."""
        return next((c for c in self.status.get("conditions") or () if c.get("type") == kind), None)


def kube_objects(items: list[dict[str, Any]] | None) -> list[KubeObject]:
    return [KubeObject(i) for i in items or ()]
