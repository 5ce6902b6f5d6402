"""EKS add-ons for the emulator's moto server, which has none (moto 5.2's EKS URLs stop at node groups and Fargate
profiles: DescribeAddon answers 404 "Not yet implemented").

An imitation of CreateAddon, DescribeAddon, DeleteAddon and ListAddons as the EKS service model defines them
(botocore data/eks/2017-11-01/service-2.json: their requestUri, the Addon shape, ResourceNotFoundException and
ResourceInUseException): an add-on is ACTIVE once created and gone once deleted, and dies with its cluster. It is
added to moto's own EKS routes and responses, so requests go through moto's routing, auth and serialisation.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

ROUTES = {
    "{0}/clusters/(?P<name>[^/]+)/addons$": "dispatch",
    "{0}/clusters/(?P<name>[^/]+)/addons/(?P<addonName>[^/]+)$": "dispatch",
}


def _error(code: str, message: str, status: int) -> tuple[str, dict[str, Any]]:
    return json.dumps({"message": message}), {"status": status, "x-amzn-ErrorType": code}


def _store(response: Any) -> dict[str, dict[str, Any]] | None:
    """The cluster's add-ons, kept on moto's cluster object (so they go with it); None: no such cluster."""
    cluster = response.eks_backend.clusters.get(response._get_param("name"))
    if cluster is None:
        return None
    if not hasattr(cluster, "gpuctl_test_addons"):
        cluster.gpuctl_test_addons = {}
    return cluster.gpuctl_test_addons


def create_addon(self: Any) -> tuple[str, dict[str, Any]]:
    addons, name = _store(self), self._get_param("addonName")
    if addons is None:
        return _error("ResourceNotFoundException", f"No cluster found for name: {self._get_param('name')}.", 404)
    if name in addons:
        return _error("ResourceInUseException", f"Addon already exists: {name}", 409)
    now = datetime.now(timezone.utc).timestamp()
    addons[name] = {"addonName": name, "clusterName": self._get_param("name"), "status": "ACTIVE",
                    "addonVersion": self._get_param("addonVersion") or "v1.0.0-eksbuild.1",
                    "health": {"issues": []}, "createdAt": now, "modifiedAt": now,
                    "tags": self._get_param("tags") or {},
                    "addonArn": f"arn:aws:eks:{self.region}:123456789012:addon/{self._get_param('name')}/{name}"}
    return json.dumps({"addon": addons[name]}), {"status": 200}


def describe_addon(self: Any) -> tuple[str, dict[str, Any]]:
    addons, name = _store(self), self._get_param("addonName")
    if addons is None or name not in addons:
        return _error("ResourceNotFoundException", f"No addon: {name} found in cluster: {self._get_param('name')}",
                      404)
    return json.dumps({"addon": addons[name]}), {"status": 200}


def delete_addon(self: Any) -> tuple[str, dict[str, Any]]:
    addons, name = _store(self), self._get_param("addonName")
    if addons is None or name not in addons:
        return _error("ResourceNotFoundException", f"No addon: {name} found in cluster: {self._get_param('name')}",
                      404)
    return json.dumps({"addon": {**addons.pop(name), "status": "DELETING"}}), {"status": 200}


def list_addons(self: Any) -> tuple[str, dict[str, Any]]:
    addons = _store(self)
    if addons is None:
        return _error("ResourceNotFoundException", f"No cluster found for name: {self._get_param('name')}.", 404)
    return json.dumps({"addons": sorted(addons)}), {"status": 200}


def install() -> None:
    """Add the add-on routes and actions to moto's EKS service (before its server serves the first EKS call)."""
    from moto.eks import urls
    from moto.eks.responses import EKSResponse

    for path in ROUTES:
        urls.url_paths.setdefault(path, urls.response.dispatch)
    for action in (create_addon, describe_addon, delete_addon, list_addons):
        setattr(EKSResponse, action.__name__, action)
