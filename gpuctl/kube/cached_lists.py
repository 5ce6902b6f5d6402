"""A Kube whose LISTs of chosen kinds are read from informers (gpuctl.kube.informer), one per selection, made at
its first LIST: a wait that looks at the same thousand nodes every second then reads them from a watch's cache.
At 1,000 nodes a look of the capacity wait LISTed the nodes and the device plugin's pods for about 0.4 CPU
seconds on each side, the kube-apiserver's and gpuctl's, on a control plane that was busy converging them.

What it reads lags the cluster by a moment (a watch), so a wait that ends on it confirms its end with LISTs of its
own. Everything else (other kinds, writes, GETs) goes to the cluster as through the Kube it wraps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gpuctl.kube.informer import Informer
from gpuctl.kube.kube import Kube, Resource
from gpuctl.kube.kube_object import KubeObject


class CachedLists(Kube):
    """`kube`, with the LISTs of `kinds` ((apiVersion, kind) pairs) served from informers until close()."""

    def __init__(self, kube: Kube, kinds: frozenset[tuple[str, str]]) -> None:
        super().__init__(kube.client)
        self._kube, self._kinds = kube, kinds
        self._informers: dict[tuple[str, str, str | None, str, str], Informer] = {}
        self._guard = threading.Lock()

    def resource(self, api_version: str, kind: str) -> Resource:
        return self._kube.resource(api_version, kind)  # one discovery for both

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
             fields: str = "", what: str | None = None) -> list[KubeObject]:
        if (api_version, kind) not in self._kinds:
            return self._kube.list(api_version, kind, namespace, labels=labels, fields=fields, what=what)
        key = (api_version, kind, namespace, labels, fields)
        with self._guard:
            if (informer := self._informers.get(key)) is None:
                informer = self._informers[key] = Informer(self._kube, api_version, kind, namespace, labels=labels,
                                                           fields=fields).start()
        return informer.items()  # the first waits for its LIST (and raises what that LIST raised)

    def close(self) -> None:
        """Stop the informers (each thread ends with its watch request)."""
        with self._guard:
            for informer in self._informers.values():
                informer.stop()
            self._informers.clear()


@contextmanager
def cached_lists(kube: Kube, kinds: frozenset[tuple[str, str]]) -> Iterator[Kube]:
    """A CachedLists of `kube` for the block, closed after it."""
    cached = CachedLists(kube, kinds)
    try:
        yield cached
    finally:
        cached.close()
