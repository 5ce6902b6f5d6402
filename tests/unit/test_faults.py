"""Faults: servers that never answer or refuse, credentials echoed in error text, --debug exit codes.

The servers here are real sockets on 127.0.0.1: one accepts connections and never answers (a
frozen process), one port is closed (nothing listens), and one answers every request with an error
that echoes the credentials it was sent.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.kube.errors import KubeTimeout
from gpuctl.util import redact
from gpuctl.util.errors import CloudError, ClusterError, ExitCode, RequestTimeout, UsageError
from gpuctl.util.timeouts import Deadlines, request_deadlines
from tests.conftest import run_gpuctl
from tests.unit import local_servers
from tests.unit.local_servers import hanging_server, http_server

SHORT = "1"  # GPUCTL_REQUEST_TIMEOUT in these tests: one second to connect and to answer
TOKEN = "gpuctl-test-bearer-0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_secrets_between_tests() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that accepts every connection and never sends a byte."""
    with hanging_server() as url:
        yield url


@pytest.fixture
def closed_port() -> str:
    return local_servers.closed_port()


class _Echo(BaseHTTPRequestHandler):
    """Answers like a kube-apiserver / AWS / Keystone that quotes the request's credentials back."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length).decode(errors="replace") if length else ""
        echoed = f"{self.headers.get('Authorization', '')} {self.headers.get('X-Amz-Security-Token', '')} {sent}"
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                           "message": f"forbidden: credentials {echoed} are not allowed",
                           "__type": "AccessDeniedException"}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", "AccessDeniedException")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo_server() -> Iterator[str]:
    with http_server(_Echo) as url:
        yield url


def kubeconfig(tmp_path: Path, server: str, token: str = TOKEN) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def gpuctl_timed(*args: str, env: dict[str, str]) -> tuple[Any, float]:
    started = time.monotonic()
    proc = run_gpuctl(*args, env=env, timeout=120)
    return proc, time.monotonic() - started


# -- deadlines -----------------------------------------------------------------------------------

def test_default_deadlines_are_10s_connect_and_30s_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCTL_REQUEST_TIMEOUT", raising=False)
    assert request_deadlines() == Deadlines(10.0, 30.0)
    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", "4")
    assert request_deadlines() == Deadlines(4.0, 4.0)
    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="GPUCTL_REQUEST_TIMEOUT"):
        request_deadlines()


def test_a_watch_may_be_silent_for_its_timeout_seconds() -> None:
    from gpuctl.kube.client import request_timeout

    deadlines = Deadlines(10.0, 30.0)
    assert request_timeout("https://k:6443/api/v1/nodes?labelSelector=a", deadlines) == (10.0, 30.0)
    assert request_timeout("https://k:6443/api/v1/pods?watch=true&timeoutSeconds=300", deadlines) == (10.0, 330.0)
    assert request_timeout("https://k:6443/api/v1/namespaces/a/pods/p/log?follow=true", deadlines) == (10.0, 30.0)


# -- Kubernetes ----------------------------------------------------------------------------------

@pytest.mark.slow  # real deadlines against a silent server
def test_kube_request_to_a_silent_server_raises_request_timeout(silent_server: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client import CoreV1Api

    from gpuctl.kube.client import api_client

    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", SHORT)
    v1 = CoreV1Api(api_client(kubeconfig(tmp_path, silent_server)))
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as caught:
        v1.list_node()
    assert time.monotonic() - started < 3  # one attempt of 1 s: a request that timed out is not repeated
    assert caught.value.exit_code == ExitCode.TIMEOUT and silent_server in caught.value.message
    assert isinstance(caught.value, KubeTimeout)  # the client's: a Kubernetes request error too
    wrapped = caught.value.in_context("listing nodes")  # as `requesting("listing nodes")` words it
    assert isinstance(wrapped, RequestTimeout) and wrapped.message.startswith("listing nodes failed: ")


@pytest.mark.slow  # real deadlines against a silent server
def test_status_on_a_silent_server_exits_7_naming_it(silent_server: str, tmp_path: Path,
                                                     isolated_env: dict[str, str]) -> None:
    env = dict(isolated_env, GPUCTL_REQUEST_TIMEOUT=SHORT)
    for debug in ((), ("--debug",)):
        proc, took = gpuctl_timed(*debug, "--kubeconfig", str(kubeconfig(tmp_path, silent_server)), "status", env=env)
        assert proc.returncode == ExitCode.TIMEOUT, proc.stderr  # --debug changes nothing but the traceback
        assert took < 15, took
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and silent_server in last and "did not answer" in last
        assert ("Traceback" in proc.stderr) == bool(debug)


@pytest.mark.slow  # gpuctl processes
def test_refused_connection_exits_5_at_once(closed_port: str, tmp_path: Path, isolated_env: dict[str, str]) -> None:
    for command in (("status",), ("tenant", "list"), ("validate",)):
        proc, took = gpuctl_timed("--kubeconfig", str(kubeconfig(tmp_path, closed_port)), *command, env=isolated_env)
        assert proc.returncode == ExitCode.CLUSTER, proc.stderr
        assert took < 10, took
        assert proc.stderr.count("\n") == 1 and f"cannot connect to the kube-apiserver at {closed_port}" in proc.stderr


@pytest.mark.slow  # gpuctl processes
def test_kube_error_echoing_the_bearer_token_is_redacted(echo_server: str, tmp_path: Path,
                                                        isolated_env: dict[str, str]) -> None:
    for debug in ((), ("--debug",)):
        proc = run_gpuctl(*debug, "--kubeconfig", str(kubeconfig(tmp_path, echo_server)), "status", env=isolated_env)
        assert proc.returncode == ExitCode.CLUSTER, proc.stderr
        assert "forbidden: credentials Bearer ***" in proc.stderr
        assert TOKEN not in proc.stderr and TOKEN[:20] not in proc.stderr.replace("***", "")


class _Initializing(BaseHTTPRequestHandler):
    """A kube-apiserver just restarted: its watch cache answers 429 'storage is (re)initializing' with
    Retry-After (apiserver cacher, responsewriters.ErrorNegotiated) to the first `busy` requests."""

    busy = 0
    retry_after = "1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        code, message = (429, "storage is (re)initializing") if type(self).busy > 0 else (200, "")
        type(self).busy -= 1
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "code": code, "message": message,
                           "items": [], "metadata": {}}).encode()
        self.send_response(code)
        if code == 429:
            self.send_header("Retry-After", type(self).retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("retry_after", ["0", "Soon"])
@pytest.mark.slow  # real retries: up to 26 s
def test_a_429_with_retry_after_is_retried_any_verb_then_raised(tmp_path: Path, retry_after: str) -> None:
    from kubernetes.client import CoreV1Api

    from gpuctl.kube.client import RETRY_AFTER_RETRIES, api_client
    from gpuctl.kube.errors import KubeUnavailable

    _Initializing.retry_after = retry_after
    with http_server(_Initializing) as url:
        v1 = CoreV1Api(api_client(kubeconfig(tmp_path, url)))
        _Initializing.busy = 2
        assert v1.list_node().items == []
        _Initializing.busy = 1
        v1.create_namespace({"metadata": {"name": "t"}})  # not processed, so a POST is safe to send again
        if retry_after == "0":  # a server that stays busy: the answer after the last retry is the error
            _Initializing.busy = RETRY_AFTER_RETRIES + 1
            with pytest.raises(KubeUnavailable, match="storage is"):
                v1.list_node()


def test_kubeconfig_client_key_is_registered(tmp_path: Path) -> None:
    from gpuctl.kube.client import api_client

    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
    path = kubeconfig(tmp_path, "https://127.0.0.1:1")
    doc = yaml.safe_load(path.read_text())
    import base64

    doc["users"][0]["user"] = {"client-certificate-data": base64.b64encode(b"not-a-cert").decode(),
                               "client-key-data": base64.b64encode(key.encode()).decode(),
                               "username": "admin", "password": "hunter2-hunter2"}
    path.write_text(yaml.safe_dump(doc))
    api_client(path)
    assert redact.redact("key line MIIEvQIBADANBgkqhkiG9w0BAQEFAASC and hunter2-hunter2") == "key line *** and ***"


# -- the error boundary --------------------------------------------------------------------------

def test_redact_replaces_registered_secrets_only() -> None:
    redact.register("s3cr3t-token-value", b"bytes-secret-1234", "short", None)
    assert redact.redact("a s3cr3t-token-value b bytes-secret-1234 c short") == "a *** b *** c short"
    redact.register("s3cr3t-token-value-longer")  # the longer secret goes first, leaving no tail
    assert redact.redact("x s3cr3t-token-value-longer") == "x ***"


def test_fail_redacts_the_printed_line(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuctl.cli.main import _fail

    redact.register("AQoDYXdzEJr-session-token")
    assert _fail("AWS said: token AQoDYXdzEJr-session-token is expired", ExitCode.CLOUD) == ExitCode.CLOUD
    assert capsys.readouterr().err == "error: AWS said: token *** is expired\n"


def test_everything_on_stderr_is_redacted_during_a_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli import main

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)

    def leaky(args: list[str], debug: bool) -> int:
        redact.register("leaked-password-123")
        print("log line with leaked-password-123", file=sys.stderr)
        import logging

        logging.getLogger("gpuctl-test").addHandler(handler := logging.StreamHandler(sys.stderr))
        logging.getLogger("gpuctl-test").error("logged leaked-password-123")
        logging.getLogger("gpuctl-test").removeHandler(handler)
        return 0

    monkeypatch.setattr(main, "_run", leaky)
    assert main.run(["gpus"]) == 0
    assert sys.stderr is err
    assert err.getvalue() == "log line with ***\nlogged ***\n"


@pytest.mark.parametrize("debug", [(), ("--debug",)])
def test_debug_keeps_the_exit_code(debug: tuple[str, ...], isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl(*debug, "mig", "validate", "7g.40gb-1g.5gb", "--gpu", "a100-40gb", env=isolated_env)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert ("Traceback" in proc.stderr) == bool(debug)
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


# -- AWS -----------------------------------------------------------------------------------------

@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EKS"):
        monkeypatch.delenv(name, raising=False)
    secrets = {"AWS_ACCESS_KEY_ID": "AKIAFAULTTEST0000000", "AWS_SECRET_ACCESS_KEY": "fault-test-secret-key-value",
               "AWS_SESSION_TOKEN": "fault-test-session-token-value"}
    for name, value in {**secrets, "AWS_CONFIG_FILE": str(tmp_path / "none"),
                        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true",
                        "GPUCTL_REQUEST_TIMEOUT": SHORT}.items():
        monkeypatch.setenv(name, value)
    return secrets


@pytest.mark.slow  # real deadlines against a silent server
def test_aws_call_to_a_silent_endpoint_exits_7_after_two_attempts(silent_server: str, aws_env: dict[str, str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.providers.eks.aws import AwsSession, translated

    monkeypatch.setenv("AWS_ENDPOINT_URL", silent_server)
    eks = AwsSession(None, "eu-west-1").client("eks")
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as caught, translated("listing EKS clusters"):
        eks.list_clusters()
    took = time.monotonic() - started
    assert 2 <= took < 6, took  # two attempts of 1 s (and a backoff under a second), not MAX_ATTEMPTS
    assert caught.value.exit_code == ExitCode.TIMEOUT
    assert silent_server in caught.value.message and "listing EKS clusters" in caught.value.message


def test_aws_refused_endpoint_is_a_cloud_error(closed_port: str, aws_env: dict[str, str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.providers.eks.aws import AwsSession, translated

    monkeypatch.setenv("AWS_ENDPOINT_URL", closed_port)
    monkeypatch.setattr("gpuctl.providers.eks.aws.MAX_ATTEMPTS", 2)
    with pytest.raises(CloudError) as caught, translated("listing EKS clusters"):
        AwsSession(None, "eu-west-1").client("eks").list_clusters()
    assert caught.value.exit_code == ExitCode.CLOUD and closed_port in caught.value.message


def test_aws_error_echoing_the_secret_key_and_session_token_is_redacted(
        echo_server: str, aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from gpuctl.cli.main import _fail
    from gpuctl.providers.eks.aws import AwsSession, translated

    monkeypatch.setenv("AWS_ENDPOINT_URL", echo_server)
    with pytest.raises(CloudError) as caught, translated("listing EKS clusters"):
        AwsSession(None, "eu-west-1").client("eks").list_clusters()
    assert aws_env["AWS_SESSION_TOKEN"] in caught.value.message  # what AWS (here, its stand-in) sent back
    _fail(caught.value.one_line(), caught.value.exit_code)
    printed = capsys.readouterr().err
    assert aws_env["AWS_SESSION_TOKEN"] not in printed and "***" in printed
    assert redact.redact(aws_env["AWS_SECRET_ACCESS_KEY"]) == "***"


# -- OpenStack -----------------------------------------------------------------------------------

@pytest.fixture
def os_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("OS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "clouds.yaml"))
    (tmp_path / "clouds.yaml").write_text("clouds: {}\n")
    for name, value in {"OS_USERNAME": "demo", "OS_PASSWORD": "fault-test-os-password", "OS_PROJECT_NAME": "demo",
                        "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
                        "OS_IDENTITY_API_VERSION": "3", "GPUCTL_REQUEST_TIMEOUT": SHORT}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.slow  # real deadlines against a silent server
def test_keystone_that_never_answers_exits_7(silent_server: str, os_env: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.providers.openstack.magnum import MagnumApi, connect

    monkeypatch.setenv("OS_AUTH_URL", f"{silent_server}/v3")
    conn = connect(None, None)
    assert redact.redact("password fault-test-os-password") == "password ***"
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as caught:
        MagnumApi(conn).authenticate()
    assert time.monotonic() - started < 6  # two attempts of 1 s, half a second apart
    assert caught.value.exit_code == ExitCode.TIMEOUT and silent_server in caught.value.message


def test_keystone_refused_is_a_cloud_error(closed_port: str, os_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.providers.openstack.magnum import MagnumApi, connect

    monkeypatch.setenv("OS_AUTH_URL", f"{closed_port}/v3")
    with pytest.raises(CloudError) as caught:
        MagnumApi(connect(None, None)).authenticate()
    assert caught.value.exit_code == ExitCode.CLOUD and closed_port in caught.value.message


def test_magnum_error_echoing_the_token_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    """Magnum answers 500 with a body quoting the X-Auth-Token: the token in use is registered first."""
    from types import SimpleNamespace

    from gpuctl.cli.main import _fail
    from gpuctl.providers.openstack.magnum import MagnumApi

    token = "gAAAAABfault-test-keystone-token"
    body = json.dumps({"errors": [{"status": 500, "detail": f"backend failed for X-Auth-Token: {token}"}]})
    answer = SimpleNamespace(status_code=500, text=body, content=body, ok=False, headers={})
    proxy = SimpleNamespace(request=lambda *a, **k: answer, get_endpoint=lambda: "https://magnum.example/v1")
    conn = SimpleNamespace(container_infrastructure_management=proxy,
                           session=SimpleNamespace(auth=SimpleNamespace(auth_ref=SimpleNamespace(auth_token=token))))
    with pytest.raises(CloudError) as caught:
        MagnumApi(conn).list_clusters()  # type: ignore[arg-type]
    _fail(caught.value.one_line(), caught.value.exit_code)
    printed = capsys.readouterr().err
    assert token not in printed and "X-Auth-Token: ***" in printed


# -- waits ---------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_waits_off_a_terminal_print_only_the_periodic_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.util import progress

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.waiting("nvidia.com/mig.config.state=success", 300, every=0.0) as wait:
        wait.update("1/3 nodes")
    with progress.waiting("allocatable GPUs on nodes a=b", 120) as wait:
        wait.update("not yet")
    assert err.getvalue() == "  waiting for nvidia.com/mig.config.state=success: 1/3 nodes (0s)\n"


@pytest.mark.slow  # sleeps 0.6 s while the live line redraws
def test_waits_on_a_terminal_show_a_live_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.util import progress

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with progress.waiting("capacity on a=b", 120, every=0.0) as wait:
        wait.update("gpu-0 has none")
        time.sleep(0.3)
        wait.update("gpu-0 has none " + "x" * 200)  # never wraps: one line, cut to the terminal's width
        time.sleep(0.3)
    shown = term.getvalue()
    # (the seconds waited so far: 0 or 1, on a loaded machine)
    assert re.search(r"waiting for capacity on a=b \([01]s of 120s\): gpu-0 has none", shown), shown
    assert "  waiting for" not in shown  # the live line replaces the periodic lines
    assert all(len(line) < 120 for line in shown.splitlines())


@pytest.mark.slow  # real deadlines against a silent server
def test_api_wait_names_the_server_and_stops_on_a_frozen_one(silent_server: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.kube.kube import Kube, wait_for_api

    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", SHORT)
    started = time.monotonic()
    with pytest.raises(RequestTimeout, match=silent_server):
        wait_for_api(Kube.connect(kubeconfig(tmp_path, silent_server)), 60)
    assert time.monotonic() - started < 5  # frozen is not "starting": no 60 s of retries


@pytest.mark.slow  # a real wait deadline
def test_api_wait_on_a_refused_port_times_out_naming_it(closed_port: str, tmp_path: Path) -> None:
    from gpuctl.kube.kube import Kube, wait_for_api
    from gpuctl.util.errors import WaitTimeout

    with pytest.raises(WaitTimeout, match=f"the kube-apiserver at {closed_port} not ready after 1s"):
        wait_for_api(Kube.connect(kubeconfig(tmp_path, closed_port)), 1)


def test_cluster_error_types_are_distinct() -> None:
    """A request timeout is not a WaitTimeout: code that turns a failed wait into a ClusterError
    (the sim provider's start-up wait) must let a frozen server's exit 7 through."""
    from gpuctl.util.errors import WaitTimeout

    assert not issubclass(RequestTimeout, WaitTimeout) and RequestTimeout.exit_code == WaitTimeout.exit_code
    assert not issubclass(RequestTimeout, ClusterError)
