"""`nodegroup scale --nodes 0` as each cloud is asked for it, where the sim cannot show it: EKS's
UpdateNodegroupConfig (minSize 0 and desiredSize 0 are EKS's to take; maxSize stays at least 1) and Magnum's
resize at microversion 1.10 or later (magnum/api/controllers/v1/cluster_actions.py: resize to 0 from 1.10 on,
within min_node_count, so the minimum is lowered first). The bounds rule both share (providers.base.scaled_bounds)
refuses, naming the flag, what the cloud would refuse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.model.change import Change
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.providers.base import scaled_bounds
from gpuctl.providers.eks.provider import EksProvider
from gpuctl.providers.openstack.magnum import MagnumApi
from gpuctl.providers.openstack.provider import MagnumProvider
from gpuctl.util.errors import UsageError


class FakeEks:
    """describe_nodegroup / update_nodegroup_config of one ACTIVE node group; the updates asked for."""

    def __init__(self, scaling: dict[str, int]) -> None:
        self.group = {"nodegroupName": "gpu", "status": "ACTIVE", "scalingConfig": dict(scaling),
                      "instanceTypes": ["g4dn.xlarge"]}
        self.updates: list[dict[str, Any]] = []

    def describe_nodegroup(self, clusterName: str, nodegroupName: str) -> dict[str, Any]:  # noqa: N803
        return {"nodegroup": self.group}

    def update_nodegroup_config(self, **request: Any) -> None:
        self.updates.append(request)
        self.group["scalingConfig"] = request["scalingConfig"]


def eks_with(scaling: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> tuple[EksProvider, FakeEks]:
    fake = FakeEks(scaling)
    provider = EksProvider(CloudOptions(region="us-east-1"))
    monkeypatch.setattr(provider, "_eks", lambda: fake)
    return provider, fake


def test_eks_scale_to_0_lowers_the_minimum_and_keeps_the_maximum(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, fake = eks_with({"minSize": 2, "maxSize": 3, "desiredSize": 2}, monkeypatch)
    assert provider.scale_node_group("eks1", "gpu", 0) is Change.UPDATED
    assert fake.updates == [{"clusterName": "eks1", "nodegroupName": "gpu",
                             "scalingConfig": {"minSize": 0, "maxSize": 3, "desiredSize": 0}}]
    assert provider.get_node_group("eks1", "gpu").nodes == 0  # type: ignore[union-attr]


def test_eks_scale_sets_the_bounds_given(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, fake = eks_with({"minSize": 1, "maxSize": 1, "desiredSize": 1}, monkeypatch)
    provider.scale_node_group("eks1", "gpu", 2, min_nodes=0, max_nodes=4)
    assert fake.updates[-1]["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    info = provider.get_node_group("eks1", "gpu")
    assert info is not None and (info.min_nodes, info.max_nodes) == (0, 4)


def test_eks_scale_refuses_a_minimum_above_the_count_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, fake = eks_with({"minSize": 1, "maxSize": 2, "desiredSize": 1}, monkeypatch)
    with pytest.raises(UsageError, match="--min-nodes: must be at most --nodes \\(0\\), got 1"):
        provider.scale_node_group("eks1", "gpu", 0, min_nodes=1)
    with pytest.raises(UsageError, match="--max-nodes: must be at least --nodes \\(0\\) and 1, got 0"):
        provider.scale_node_group("eks1", "gpu", 0, max_nodes=0)  # EKS: maxSize >= 1
    assert fake.updates == []


class FakeResponse:
    def __init__(self, status: int, body: Any = None) -> None:
        self.status_code, self._body = status, body
        self.text = json.dumps(body)
        self.content = b"x" if body is not None else b""

    def json(self) -> Any:
        return self._body


class FakeMagnum(MagnumApi):
    """Magnum's REST answers for one cluster and node group; every request as sent (method, path, body, version)."""

    def __init__(self, version: tuple[int, int]) -> None:
        self._version: tuple[int, int] = version
        self.cluster: dict[str, Any] = {"uuid": "c-1", "name": "os1", "status": "CREATE_COMPLETE"}
        self.group: dict[str, Any] = {"uuid": "g-1", "name": "gpu", "role": "worker", "status": "CREATE_COMPLETE", "node_count": 2,
                      "min_node_count": 2, "max_node_count": 3, "updated_at": "0"}
        self.sent: list[tuple[str, str, Any, str]] = []

    def _request(self, method: str, path: str, doing: str, body: Any = None, log: bool = True) -> Any:
        version = f"container-infra {self._version[0]}.{self._version[1]}"
        if method != "GET":
            self.sent.append((method, path, body, version))
        if path == "/clusters/os1":
            return FakeResponse(200, self.cluster)
        if path == "/clusters/c-1/nodegroups/gpu":
            if method == "PATCH":
                for op in body:
                    self.group[op["path"].lstrip("/")] = op["value"]
            self.group.update(status="UPDATE_COMPLETE", updated_at=str(int(self.group["updated_at"]) + 1))
            return FakeResponse(200 if method == "GET" else 202, dict(self.group))
        if path == "/clusters/c-1/actions/resize":
            if body["node_count"] == 0 and self._version < (1, 10):
                return FakeResponse(400, {"errors": [{"detail": "Resizing a nodegroup to zero is not supported"}]})
            if body["node_count"] < self.group["min_node_count"]:
                return FakeResponse(400, {"errors": [{"detail": "Resizing gpu outside the allowed range"}]})
            self.group.update(node_count=body["node_count"], status="UPDATE_COMPLETE",
                              updated_at=str(int(self.group["updated_at"]) + 1))
            return FakeResponse(202, {"uuid": "c-1"})
        raise AssertionError(f"unexpected {method} {path}")


def test_magnum_scale_to_0_lowers_min_node_count_then_resizes() -> None:
    provider = MagnumProvider(CloudOptions())
    api = provider._magnum = FakeMagnum((1, 10))
    assert provider.scale_node_group("os1", "gpu", 0) is Change.UPDATED
    assert api.sent == [
        ("PATCH", "/clusters/c-1/nodegroups/gpu", [{"op": "replace", "path": "/min_node_count", "value": 0}],
         "container-infra 1.10"),
        ("POST", "/clusters/c-1/actions/resize", {"node_count": 0, "nodegroup": "gpu"}, "container-infra 1.10"),
    ]
    info = provider.get_node_group("os1", "gpu")
    assert info is not None and (info.nodes, info.min_nodes, info.max_nodes) == (0, 0, 3)


def test_magnum_scale_takes_the_bounds_given(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = MagnumProvider(CloudOptions())
    api = provider._magnum = FakeMagnum((1, 14))
    monkeypatch.setattr(provider, "_wait_for_nodes", lambda *_: None)  # (its kubelets: the OpenStack bed's)
    provider.scale_node_group("os1", "gpu", 1, min_nodes=1, max_nodes=5)
    assert [(m, p, b) for m, p, b, _ in api.sent] == [
        ("PATCH", "/clusters/c-1/nodegroups/gpu", [{"op": "replace", "path": "/min_node_count", "value": 1},
                                                   {"op": "replace", "path": "/max_node_count", "value": 5}]),
        ("POST", "/clusters/c-1/actions/resize", {"node_count": 1, "nodegroup": "gpu"}),
    ]


@pytest.mark.parametrize("current,nodes,low,high,wanted", [
    ((2, 3), 0, None, None, (0, 3)),  # a scale to 0 lowers the minimum
    ((1, 2), 4, None, None, (1, 4)),  # ... above the maximum raises it
    ((0, None), 5, None, None, (0, None)),  # Magnum's "no maximum" stays
    ((1, 1), 0, 0, 2, (0, 2)),
])
def test_scaled_bounds(current: tuple[int, int | None], nodes: int, low: int | None, high: int | None,
                       wanted: tuple[int, int | None]) -> None:
    assert scaled_bounds(current, nodes, low, high) == wanted
