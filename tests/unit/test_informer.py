"""kube/informer.py's list-then-watch logic against a scripted API (the real kube-apiserver's side is
tests/integration/test_kube_door.py): events applied in order, a selector's DELETED taken out, 410 Gone and a
broken stream answered with a new LIST, a first read that raises what the LIST raised (as soon as it did)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuctl.kube import informer
from gpuctl.kube.errors import KubeApiError
from gpuctl.kube.informer import Informer
from gpuctl.kube.kube_object import KubeObject


def obj(name: str, version: int, **labels: str) -> KubeObject:
    return KubeObject({"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version),
                                    "labels": labels}})


class ScriptedApi:
    """Answers each LIST and each watch from a script, then blocks the next watch until released."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = lists  # each: (items, version), an exception, or an Event the next answer waits for
        self.watches = watches  # each: a list of (type, object) events, ending with an exception or not
        self.calls: list[tuple[str, str]] = []
        self.done = threading.Event()
        self.release = threading.Event()

    def list_with_version(self, *what: Any, **selectors: Any) -> tuple[list[KubeObject], str]:
        self.calls.append(("list", ""))
        answer = self.lists.pop(0)
        if isinstance(answer, threading.Event):  # a LIST that answers once the test says so
            answer.wait(10)
            answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch(self, *what: Any, resource_version: str, **options: Any) -> Iterator[tuple[str, KubeObject]]:
        self.calls.append(("watch", resource_version))
        if not self.watches:
            self.done.set()
            self.release.wait(10)
            return
        for event in self.watches.pop(0):
            if isinstance(event, Exception):
                raise event
            yield event


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer, "RETRY_S", 0.0)
    monkeypatch.setattr(informer, "SYNC_S", 5.0)


def run(api: ScriptedApi) -> list[str]:
    cache = Informer(api, "v1", "ConfigMap").start()  # type: ignore[arg-type]
    try:
        assert api.done.wait(10), api.calls
        return sorted(f"{o.name}@{o.resource_version}" for o in cache.items())
    finally:
        cache.stop()
        api.release.set()


def test_events_after_the_list_are_applied_in_order() -> None:
    api = ScriptedApi([([obj("a", 1), obj("b", 2)], "2")],
                      [[("ADDED", obj("c", 3)), ("MODIFIED", obj("a", 4)), ("DELETED", obj("b", 5)),
                        ("BOOKMARK", obj("", 6))]])
    assert run(api) == ["a@4", "c@3"]
    assert api.calls == [("list", ""), ("watch", "2"), ("watch", "6")]  # the next watch goes on from the last version


def test_410_gone_lists_again_and_the_new_list_replaces_the_old() -> None:
    gone = KubeApiError("too old resource version", status=410)
    api = ScriptedApi([([obj("a", 1), obj("b", 2)], "2"), ([obj("b", 7)], "7")], [[("ADDED", obj("c", 3)), gone]])
    assert run(api) == ["b@7"]  # a and c went while no watch ran: the new LIST has neither
    assert api.calls == [("list", ""), ("watch", "2"), ("list", ""), ("watch", "7")]


def test_a_broken_stream_lists_again() -> None:
    api = ScriptedApi([([obj("a", 1)], "1"), ([obj("a", 9)], "9")], [[ValueError("cut mid-event")]])
    assert run(api) == ["a@9"]
    assert api.calls == [("list", ""), ("watch", "1"), ("list", ""), ("watch", "9")]


def test_a_first_read_raises_what_the_list_raised_until_one_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = KubeApiError("listing ConfigMap failed: connection refused")
    gate = threading.Event()
    api = ScriptedApi([refused, gate, ([obj("a", 1)], "1")], [])
    cache = Informer(api, "v1", "ConfigMap").start()  # type: ignore[arg-type]
    try:
        monkeypatch.setattr(informer, "SYNC_S", 0.5)
        with pytest.raises(KubeApiError, match="connection refused"):
            cache.items()
        gate.set()
        monkeypatch.setattr(informer, "SYNC_S", 5.0)
        assert [o.name for o in cache.items()] == ["a"]
        assert api.done.wait(10), api.calls
        assert [c for c, _ in api.calls] == ["list", "list", "watch"]
    finally:
        cache.stop()
        api.release.set()


def test_a_first_list_that_fails_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader learns of a refused first LIST when it is refused, as a LIST of its own would tell it, not once
    SYNC_S has passed (here a minute: this test would take it)."""
    api = ScriptedApi([KubeApiError("listing Pod: forbidden")], [])
    monkeypatch.setattr(informer, "SYNC_S", 60.0)
    monkeypatch.setattr(informer, "RETRY_S", 60.0)  # the next LIST comes once the cache is stopped
    cache = Informer(api, "v1", "Pod").start()  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        with pytest.raises(KubeApiError, match="forbidden"):
            cache.items()
        assert time.monotonic() - started < 30
    finally:
        cache.stop()
        api.release.set()


def test_matches_is_the_equality_selector_a_list_applies() -> None:
    pod = obj("p", 1, app="nvidia-device-plugin-daemonset", tier="gpu")
    assert pod.matches("app=nvidia-device-plugin-daemonset")
    assert pod.matches("app=nvidia-device-plugin-daemonset,tier=gpu")
    assert not pod.matches("app=other")
    assert not pod.matches("missing=x")
    assert pod.matches("")
    with pytest.raises(ValueError, match="equality-based"):
        pod.matches("app!=x")


def test_objects_are_kept_without_their_managed_fields() -> None:
    listed, changed = obj("a", 1), obj("b", 2)
    for made in (listed, changed):
        made["metadata"]["managedFields"] = [{"manager": "kwok", "operation": "Update"}]
    api = ScriptedApi([([listed], "1")], [[("ADDED", changed)]])
    cache = Informer(api, "v1", "ConfigMap").start()  # type: ignore[arg-type]
    try:
        assert api.done.wait(10), api.calls
        assert sorted((o.name, "managedFields" in o.metadata) for o in cache.items()) == [("a", False), ("b", False)]
    finally:
        cache.stop()
        api.release.set()
