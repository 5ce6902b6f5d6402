"""A list-then-watch cache of one kind, as client-go's reflector keeps one (tools/cache/reflector.go ListAndWatch):
one LIST, then one watch from the list's resourceVersion, and a new LIST where the watch cannot go on (410 Gone,
an error, a lost connection). A reader that looks at the same big list every second reads it from memory: at a
thousand nodes a node LIST is megabytes of JSON the kube-apiserver writes and the reader parses, each time.

What a reader gets is as current as the watch: a write shows up a moment after it is answered, as in any
controller's informer. A write that must not rest on a stale read carries the resourceVersion it read, and so
fails with a conflict instead (the sim's operator writes nodes so, and looks again on its next pass).

Objects are kept without metadata.managedFields, as controller-runtime's cache offers to
(pkg/cache TransformStripManagedFields: "a significant reduction in memory usage" for a reader that does not
read them); a reader that needs them LISTs."""

from __future__ import annotations

import logging
import threading
import time

from urllib3.exceptions import HTTPError

from gpuctl.kube.errors import KubeApiError
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject

log = logging.getLogger(__name__)

WATCH_S = 60  # how long one watch request lasts before it is made again from the last version seen
RETRY_S = 1.0  # the pause before a new LIST after a failed one or a broken watch
SYNC_S = 10.0  # how long a first read waits for the first LIST


class Informer:
    """The objects of `kind` (in `namespace`; None: every namespace) the selectors match, kept by a daemon thread
    from start() until stop()."""

    def __init__(self, kube: Kube, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
                 fields: str = "") -> None:
        self.kube = kube
        self.what = (api_version, kind, namespace)
        self.labels = labels
        self.fields = fields
        self._objects: dict[tuple[str | None, str], KubeObject] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._answered = threading.Event()  # the last LIST answered, or failed
        self._stopped = threading.Event()
        self._error: KubeApiError | None = None  # why the last LIST failed (raised to a reader before the first)
        self._thread = threading.Thread(target=self._run, name=f"informer-{kind}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread once its watch request ends (within WATCH_S)."""
        self._stopped.set()

    def items(self) -> list[KubeObject]:
        """The objects as last seen. Before the first LIST has answered, waits for it up to SYNC_S; where it
        failed (and none has answered since), raises what it raised, as a LIST of one's own would."""
        self._answered.wait(SYNC_S)
        if not self._synced.is_set():
            raise self._error or KubeApiError(f"listing {self.what[1]}: no answer in {SYNC_S:.0f}s",
                                              "check that the kube-apiserver runs")
        with self._lock:
            return list(self._objects.values())

    def _run(self) -> None:
        version = ""
        while not self._stopped.is_set():
            try:
                if not version:
                    version = self._list()
                version = self._watch(version)
            except KubeApiError as exc:  # 410 Gone (too old a version), an error answer, no answer
                if exc.status != 410:
                    log.info("%s informer: %s; listing again", self.what[1], exc)
                    self._stopped.wait(RETRY_S)
                version = ""
            except (HTTPError, OSError, ValueError) as exc:  # a stream cut mid-event: the watch cannot go on
                log.info("%s informer: %s; listing again", self.what[1], exc)
                self._stopped.wait(RETRY_S)
                version = ""
            except Exception:  # anything else: never a cache left with no thread keeping it
                log.exception("%s informer failed; listing again", self.what[1])
                self._stopped.wait(RETRY_S)
                version = ""

    def _list(self) -> str:
        self._answered.clear()  # a reader before it is answered waits for this LIST, not for a failed one's error
        try:
            items, version = self.kube.list_with_version(*self.what, labels=self.labels, fields=self.fields)
        except KubeApiError as exc:
            self._error = exc
            self._answered.set()
            raise
        with self._lock:
            self._objects = {(o.namespace, o.name): _stripped(o) for o in items}
        self._synced.set()
        self._answered.set()
        return version

    def _watch(self, version: str) -> str:
        """Take the changes after `version` until the server ends the watch; the last version seen."""
        started = time.monotonic()
        for kind, obj in self.kube.watch(*self.what, labels=self.labels, fields=self.fields,
                                         resource_version=version, seconds=WATCH_S):
            version = obj.resource_version or version
            with self._lock:
                if kind == "DELETED":  # (also an object that no longer matches the selectors)
                    self._objects.pop((obj.namespace, obj.name), None)
                elif kind in ("ADDED", "MODIFIED"):
                    self._objects[(obj.namespace, obj.name)] = _stripped(obj)
            if self._stopped.is_set():
                break
        if time.monotonic() - started < 1 and not self._stopped.is_set():
            self._stopped.wait(RETRY_S)  # a watch the server ended at once: do not spin
        return version


def _stripped(obj: KubeObject) -> KubeObject:
    obj.metadata.pop("managedFields", None)
    return obj
