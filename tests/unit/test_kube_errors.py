"""Kubernetes API errors are translated once, in the client (gpuctl/kube/client.py): every request made through
`api_client` raises gpuctl's typed errors (gpuctl/kube/errors.py) where it is made."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from gpuctl.kube.client import api_client, get_or_none
from gpuctl.kube.errors import (
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    KubeTimeout,
    KubeUnauthorized,
    KubeUnavailable,
    requesting,
)
from gpuctl.util.errors import ClusterError, CredentialsError, ExitCode, RequestTimeout
from tests.unit.local_servers import hanging_server, http_server

# path -> (HTTP status, the Status message the server gives)
ANSWERS = {
    "/api/v1/namespaces/missing": (404, 'namespaces "missing" not found'),
    "/api/v1/namespaces": (409, 'namespaces "taken" already exists'),
    "/api/v1/namespaces/denied": (401, "Unauthorized"),
    "/api/v1/namespaces/busy": (503, "the server is currently unable to handle the request"),
    "/api/v1/namespaces/forbidden": (403, 'namespaces "forbidden" is forbidden: User "u" cannot get'),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        status, message = ANSWERS.get(path, (200, ""))
        if status == 200:
            doc: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": path.rsplit("/", 1)[-1]}}
        else:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": status}
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """http://127.0.0.1:PORT of a tiny API server: ANSWERS, else 200 with a Namespace."""
    with http_server(_Handler) as url:
        yield url


def _config(server: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "gpuctl-test-token-0123456789"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def _v1(server: str) -> Any:
    return CoreV1Api(api_client(config_dict=_config(server)))


def test_a_refused_connection_raises_kube_unavailable_at_once() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(KubeUnavailable) as caught:
        _v1(closed).read_namespace("default")
    assert time.monotonic() - started < 5
    error = caught.value
    assert not isinstance(error, KubeTimeout) and isinstance(error, ClusterError)
    assert error.exit_code == ExitCode.CLUSTER and error.status is None
    assert f"cannot connect to the kube-apiserver at {closed}" in error.message


def test_a_404_raises_kube_not_found(server: str) -> None:
    with pytest.raises(KubeNotFound) as caught:
        _v1(server).read_namespace("missing")
    error = caught.value
    assert error.exit_code == ExitCode.CLUSTER and error.status == 404
    assert error.detail == 'namespaces "missing" not found'
    assert error.message == 'GET /api/v1/namespaces/missing failed (HTTP 404): namespaces "missing" not found'


def test_a_409_raises_kube_conflict(server: str) -> None:
    with pytest.raises(KubeConflict) as caught:
        _v1(server).create_namespace({"metadata": {"name": "taken"}})
    assert caught.value.status == 409 and caught.value.exit_code == ExitCode.CLUSTER
    assert "already exists" in caught.value.message


def test_get_or_none_is_none_on_404_only(server: str) -> None:
    v1 = _v1(server)
    assert get_or_none(v1.read_namespace, "missing") is None
    present = get_or_none(v1.read_namespace, "present")
    assert present is not None and present.metadata.name == "present"
    with pytest.raises(KubeUnavailable):
        get_or_none(v1.read_namespace, "busy")


def test_other_answers_keep_their_exit_codes(server: str) -> None:
    v1 = _v1(server)
    with pytest.raises(KubeUnauthorized) as denied:
        v1.read_namespace("denied")
    assert isinstance(denied.value, CredentialsError) and denied.value.exit_code == ExitCode.CREDENTIALS
    assert "rejected the credentials (HTTP 401)" in denied.value.message and denied.value.hint
    with pytest.raises(KubeUnavailable) as busy:
        v1.read_namespace("busy")
    assert busy.value.status == 503 and busy.value.exit_code == ExitCode.CLUSTER
    with pytest.raises(KubeApiError) as forbidden:
        v1.read_namespace("forbidden")
    assert type(forbidden.value) is KubeApiError and forbidden.value.status == 403
    assert "cannot get" in (forbidden.value.body or "")


def test_calls_without_preloaded_content_raise_the_same(server: str) -> None:
    v1 = _v1(server)
    with pytest.raises(KubeNotFound):
        v1.read_namespace("missing", _preload_content=False)
    assert json.loads(v1.read_namespace("present", _preload_content=False).data)["metadata"]["name"] == "present"


def test_requesting_names_what_failed_keeping_the_type(server: str) -> None:
    with pytest.raises(KubeNotFound) as caught, requesting("reading namespace missing"):
        _v1(server).read_namespace("missing")
    assert caught.value.message == 'reading namespace missing failed: namespaces "missing" not found'
    assert caught.value.status == 404
    with pytest.raises(KubeNotFound) as nested, requesting("applying the platform"), requesting("reading it"):
        _v1(server).read_namespace("missing")
    assert nested.value.message.startswith("reading it failed: ")  # the innermost context: the most precise


def test_a_timeout_is_a_request_timeout_and_kube_unavailable() -> None:
    assert issubclass(KubeTimeout, RequestTimeout) and issubclass(KubeTimeout, KubeUnavailable)
    assert KubeTimeout.exit_code == ExitCode.TIMEOUT
    error = KubeTimeout("the kube-apiserver at x did not answer", server="x", request="GET /api")
    assert error.server == "x" and error.request == "GET /api" and error.status is None
    assert error.in_context("listing nodes").message == "listing nodes failed: the kube-apiserver at x did not answer"


@pytest.fixture
def stalling_server() -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that sends the head of an answer and one byte of it, then nothing."""
    with hanging_server(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{") as url:
        yield url


@pytest.mark.slow  # a real read deadline
def test_an_answer_that_stops_midway_raises_kube_timeout(stalling_server: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", "1")
    v1 = _v1(stalling_server)
    for read in (lambda: v1.read_namespace("x"), lambda: v1.read_namespace("x", _preload_content=False).data):
        started = time.monotonic()
        with pytest.raises(KubeTimeout) as caught:
            read()
        assert time.monotonic() - started < 5
        assert caught.value.exit_code == ExitCode.TIMEOUT and stalling_server in caught.value.message


class _Lists(BaseHTTPRequestHandler):
    """LISTs as a kube-apiserver answers them, and a proxy's page."""

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api/v1/pods":
            body, kind = json.dumps({"kind": "PodList", "items": [{"metadata": {"name": "p"}}],
                                     "query": self.path.partition("?")[2]}).encode(), "application/json"
        elif path == "/api/v1/nodes":
            body, kind = b"<html>sign in</html>", "text/html"
        elif path == "/api/v1/namespaces":
            body, kind = json.dumps({"kind": "Namespace", "metadata": {"name": "not-a-list"}}).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_list_read_as_json_gets_its_items_and_refuses_what_is_not_a_list() -> None:
    from gpuctl.kube.kube import Kube

    with http_server(_Lists) as url:
        kube = Kube.connect(config_dict=_config(url))
        assert kube.list("v1", "Pod", labels="a=b") == [{"metadata": {"name": "p"}}]
        for kind, path in (("Node", "/api/v1/nodes"), ("Namespace", "/api/v1/namespaces")):
            with pytest.raises(KubeApiError) as caught:
                kube.list("v1", kind, what="listing")
            assert caught.value.message.endswith(f"GET {path} answered something that is not a Kubernetes list")
            assert url in (caught.value.hint or "")
        with pytest.raises(KubeNotFound):
            kube.list("resource.k8s.io/v1", "ResourceClaim")
