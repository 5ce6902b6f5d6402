"""gpuctl.kube.kube.Kube against a real kube-apiserver (the shared sim cluster): every verb, discovery of a custom
resource, the typed errors, a watch that sees a change made after its list, the informer kept by one, and the
LISTs a wait reads from informers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.kube import Informer, Kube, KubeNotFound, cached_lists

pytestmark = pytest.mark.integration

NS = "door-test"


@pytest.fixture(scope="module")
def kube(sim_cluster) -> Iterator[Kube]:
    kube = Kube.connect(sim_cluster.kubeconfig)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield kube
    kube.delete("v1", "Namespace", NS)


def config_map(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


def test_apply_get_patch_delete(kube: Kube) -> None:
    applied = kube.apply(config_map("a", x="1"))
    assert (applied.name, applied.namespace, applied["data"]) == ("a", NS, {"x": "1"})
    assert applied.at("metadata", "managedFields", default=[])[0]["manager"] == "gpuctl"
    patched = kube.patch("v1", "ConfigMap", "a", {"data": {"y": "2"}}, NS)
    assert patched["data"] == {"x": "1", "y": "2"}
    assert kube.get("v1", "ConfigMap", "a", NS)["data"]["y"] == "2"
    assert kube.delete("v1", "ConfigMap", "a", NS) is True
    assert kube.delete("v1", "ConfigMap", "a", NS) is False
    assert kube.get_or_none("v1", "ConfigMap", "a", NS) is None
    with pytest.raises(KubeNotFound, match="reading ConfigMap door-test/a"):
        kube.get("v1", "ConfigMap", "a", NS)


def test_list_by_selector_and_across_namespaces(kube: Kube) -> None:
    kube.apply(config_map("b1") | {"metadata": {"name": "b1", "namespace": NS, "labels": {"door": "yes"}}})
    kube.apply(config_map("b2"))
    mine = kube.list("v1", "ConfigMap", NS, labels="door=yes")
    assert [o.name for o in mine] == ["b1"]
    everywhere = kube.list("v1", "ConfigMap", labels="door=yes")
    assert [(o.namespace, o.name) for o in everywhere] == [(NS, "b1")]
    nodes = kube.list("v1", "Node")
    assert len(nodes) >= 3 and all(n.kind in ("", "Node") and n.name for n in nodes)
    assert kube.delete_all("v1", "ConfigMap", NS, labels="door=yes", timeout=(5.0, 10.0)) == 1  # the number gone
    assert [o.name for o in kube.list("v1", "ConfigMap", NS, labels="door=yes")] == []


def test_custom_resources_are_discovered(kube: Kube) -> None:
    """A kind not in the built-in table is found through the server's discovery; one it does not serve is
    KubeNotFound, as a missing object is."""
    crds = kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert crds, "the sim cluster installs CRDs (NFD's NodeFeature at least)"
    crd = crds[0]
    group, version = crd.spec["group"], crd.spec["versions"][0]["name"]
    assert kube.serves(f"{group}/{version}", crd.spec["names"]["kind"])
    kube.list(f"{group}/{version}", crd.spec["names"]["kind"])  # served: lists (maybe nothing)
    assert not kube.serves("example.invalid/v1", "Nothing")
    assert not kube.serves("v1", "Nothing")
    with pytest.raises(KubeNotFound):
        kube.list("v1", "Nothing")


def test_watch_sees_what_changes_after_its_list(kube: Kube) -> None:
    items, version = kube.list_with_version("v1", "ConfigMap", NS, labels="watched=yes")
    assert items == []
    threading.Timer(0.2, lambda: kube.apply(config_map("w") | {
        "metadata": {"name": "w", "namespace": NS, "labels": {"watched": "yes"}}})).start()
    for kind, obj in kube.watch("v1", "ConfigMap", NS, labels="watched=yes", resource_version=version, seconds=10):
        assert (kind, obj.name) == ("ADDED", "w")
        break
    else:
        pytest.fail("the watch ended without the ConfigMap made after its list")


def test_informer_keeps_what_its_selectors_match(kube: Kube) -> None:
    """The cache a LIST and then a watch keep: an object made, changed, relabelled out of the selector and
    deleted after the list is seen as the server says, each within moments."""
    def cached(name: str) -> dict:
        return config_map(name) | {"metadata": {"name": name, "namespace": NS, "labels": {"cached": "yes"}}}

    kube.apply(cached("c1"))
    cache = Informer(kube, "v1", "ConfigMap", NS, labels="cached=yes").start()
    try:
        def seen(expected: Callable[[dict[str, Any]], bool], what: str) -> None:
            deadline = time.monotonic() + 10
            while not expected(items := {o.name: o for o in cache.items()}):
                assert time.monotonic() < deadline, f"{what}: the cache holds {sorted(items)}"
                time.sleep(0.05)

        seen(lambda c: list(c) == ["c1"], "the object listed")
        assert "managedFields" not in cache.items()[0].metadata  # (the server sets them: apply)
        kube.apply(cached("c2"))
        seen(lambda c: sorted(c) == ["c1", "c2"], "an object made after the list")
        kube.patch("v1", "ConfigMap", "c1", {"data": {"v": "2"}}, NS)
        seen(lambda c: c["c1"].get("data") == {"v": "2"}, "a change")
        kube.patch("v1", "ConfigMap", "c2", {"metadata": {"labels": {"cached": None}}}, NS)
        seen(lambda c: list(c) == ["c1"], "an object the selector no longer matches")
        kube.delete("v1", "ConfigMap", "c1", NS)
        seen(lambda c: not c, "a deletion")
    finally:
        cache.stop()
        kube.delete_all("v1", "ConfigMap", NS)


def test_cached_lists_read_the_chosen_kinds_from_watches_and_the_rest_from_the_server(kube: Kube) -> None:
    """What a wait reads again and again: a LIST of a chosen kind is its informer's cache (one per selection, made at
    the first LIST, current within moments), any other kind a LIST of the server's, current at once."""
    kube.apply(config_map("seen", v="1") | {"metadata": {"name": "seen", "namespace": NS, "labels": {"w": "1"}}})
    with cached_lists(kube, frozenset({("v1", "ConfigMap")})) as cached:
        def seen() -> Any:
            [found] = cached.list("v1", "ConfigMap", NS, labels="w=1")
            return found

        assert seen().name == "seen"
        kube.patch("v1", "ConfigMap", "seen", {"data": {"v": "2"}}, NS)
        deadline = time.monotonic() + 10
        while seen().get("data") != {"v": "2"}:
            assert time.monotonic() < deadline, "the change did not reach the cache"
            time.sleep(0.05)
        assert "managedFields" not in seen().metadata  # the informer's copy, not a LIST's
        kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "now", "namespace": NS}})
        assert [o.name for o in cached.list("v1", "Secret", NS)] == ["now"]
        assert cached.get("v1", "ConfigMap", "seen", NS)["data"] == {"v": "2"}  # other verbs: the server's
    kube.delete_all("v1", "ConfigMap", NS)
    kube.delete_all("v1", "Secret", NS)


def test_dry_run_create_writes_nothing(kube: Kube) -> None:
    made = kube.create(config_map("dry"), dry_run=True)
    assert made.name == "dry"
    assert kube.get_or_none("v1", "ConfigMap", "dry", NS) is None
