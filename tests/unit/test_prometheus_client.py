"""gpuctl's Prometheus client (gpuctl/kube/prometheus.py) against local servers on 127.0.0.1: answers parsed,
every failure one typed error naming the URL within the request deadline, the URL judged before any request
(exit 2 naming the flag), and `gpuctl top`/`advise` failing the same way from the command line."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.kube.prometheus import Prometheus, check_prometheus_url
from gpuctl.util import redact
from gpuctl.util.errors import ClusterError, CredentialsError, ExitCode, RequestTimeout, UsageError
from tests.conftest import run_gpuctl
from tests.unit import local_servers
from tests.unit.fake_prometheus import Canned, fake_prometheus
from tests.unit.local_servers import hanging_server


@pytest.fixture(autouse=True)
def _no_secrets_between_tests() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture
def closed_port() -> str:
    return local_servers.closed_port()


def test_an_instant_query_gives_labels_and_values() -> None:
    canned = Canned()
    canned.add("up", {"job": "dcgm", "Hostname": "n1"}, 1)
    canned.add("up", {"job": "dcgm", "Hostname": "n2"}, 0.5)
    with fake_prometheus(canned) as url:
        samples = Prometheus(url).query("up")
    assert [(s.labels["Hostname"], s.value) for s in samples] == [("n1", 1.0), ("n2", 0.5)]
    assert canned.queries == ["up"]


def test_a_scalar_and_nan_are_read_as_prometheus_writes_them() -> None:
    canned = Canned(body=json.dumps({"status": "success", "data": {"resultType": "scalar",
                                                                   "result": [1.0, "NaN"]}}).encode())
    with fake_prometheus(canned) as url:
        [sample] = Prometheus(url).query("0/0")
    assert sample.labels == {} and sample.value != sample.value


def test_a_path_prefix_is_kept() -> None:
    canned = Canned()
    canned.add("up", {}, 1)
    with fake_prometheus(canned) as url:
        assert Prometheus(url + "/prefix/").query("up")[0].value == 1.0


def test_prometheus_error_answer_is_one_line_exit_5() -> None:
    canned = Canned(status=400, body=json.dumps({"status": "error", "errorType": "bad_data",
                                                 "error": "1:5: parse error:\nunexpected end"}).encode())
    with fake_prometheus(canned) as url, pytest.raises(ClusterError) as err:
        Prometheus(url).query("sum(")
    line = err.value.one_line()
    assert err.value.exit_code == ExitCode.CLUSTER
    assert "\n" not in line and "bad_data" in line and "unexpected end" in line and url in line


def test_a_server_that_is_not_prometheus_is_named() -> None:
    canned = Canned(status=404, body=b"<html>Not Found</html>")
    with fake_prometheus(canned) as url, pytest.raises(ClusterError, match="Prometheus's base URL") as err:
        Prometheus(url).query("up")
    assert "HTTP 404" in err.value.message and url in err.value.message


@pytest.mark.parametrize("result", [
    {"resultType": "vector", "result": [{"metric": {}}]},
    {"resultType": "vector", "result": [{"metric": {}, "value": "1"}]},
    {"resultType": "vector", "result": ["up"]},
    {"resultType": "vector", "result": [{"metric": ["job"], "value": [1, "1"]}]},
    {"resultType": "vector", "result": [{"metric": {"job": 1}, "value": [1, "1"]}]},
    {"resultType": "scalar", "result": [1]},
])
def test_a_malformed_answer_is_one_line_naming_the_server(result: dict[str, Any]) -> None:
    canned = Canned(body=json.dumps({"status": "success", "data": result}).encode())
    with fake_prometheus(canned) as url, pytest.raises(ClusterError) as err:
        Prometheus(url).query("up")
    assert url in err.value.one_line() and "\n" not in err.value.one_line()


def test_a_malformed_range_answer_is_one_line() -> None:
    canned = Canned(body=json.dumps({"status": "success", "data": {
        "resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"], "2"]}]}}).encode())
    with fake_prometheus(canned) as url, pytest.raises(ClusterError, match="range query"):
        Prometheus(url).query_range("up", 0, 60, 15)


def test_refused_credentials_exit_3() -> None:
    canned = Canned(status=401, body=b"Unauthorized")
    with fake_prometheus(canned) as url, pytest.raises(CredentialsError) as err:
        Prometheus(url).query("up")
    assert err.value.exit_code == ExitCode.CREDENTIALS


def test_basic_auth_from_the_url_is_sent_and_never_shown() -> None:
    canned = Canned()
    canned.add("up", {}, 1)
    with fake_prometheus(canned) as url:
        authed = url.replace("http://", "http://reader:s3cret-pass@")
        prom = Prometheus(authed)
        prom.query("up")
    headers = {k.lower(): v for k, v in canned.headers[0].items()}
    assert headers["user-agent"].startswith("gpuctl/")
    assert headers["authorization"] == "Basic " + base64.b64encode(b"reader:s3cret-pass").decode()
    assert "s3cret" not in prom.url.shown and prom.url.shown == url
    assert "s3cret-pass" not in redact.redact("x s3cret-pass y")


def test_unreachable_prometheus_exits_5_naming_the_url(closed_port: str) -> None:
    started = time.monotonic()
    with pytest.raises(ClusterError) as err:
        Prometheus(closed_port).query("up")
    assert time.monotonic() - started < 5
    assert err.value.exit_code == ExitCode.CLUSTER
    assert closed_port in err.value.message and "cannot connect" in err.value.message


def test_an_unresolvable_host_exits_5() -> None:
    with pytest.raises(ClusterError, match="cannot connect to Prometheus at http://no-such-host.invalid:9090"):
        Prometheus("http://no-such-host.invalid:9090").query("up")


@pytest.mark.slow  # a real request deadline
def test_a_silent_prometheus_ends_within_the_request_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_REQUEST_TIMEOUT", "1")
    with hanging_server() as url:
        started = time.monotonic()
        with pytest.raises(RequestTimeout) as err:
            Prometheus(url).query("up")
        took = time.monotonic() - started
    assert took < 4, took
    assert err.value.exit_code == ExitCode.TIMEOUT and url in err.value.message


@pytest.mark.parametrize("url,problem", [
    ("ftp://prom:9090", "scheme must be http or https"),
    ("prom:9090", "scheme must be http or https"),
    ("http://", "names no host"),
    ("http://prom:99999", "is not a URL"),
    ("http://prom:9090/?x=1", "no query or fragment"),
    ("http://prom:9090/#top", "no query or fragment"),
    ("http://pr om:9090", "is not a URL"),
    ("", "is not a URL"),
])
def test_a_bad_url_is_a_usage_error_naming_the_flag(url: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem) as err:
        check_prometheus_url(url, "--prometheus")
    assert err.value.field == "--prometheus" and err.value.exit_code == ExitCode.USAGE


def test_a_bad_url_never_shows_its_password() -> None:
    with pytest.raises(UsageError) as err:
        check_prometheus_url("ftp://user:hunter22@prom:9090", "--prometheus")
    assert "hunter22" not in err.value.one_line()


def test_urls_are_normalised() -> None:
    assert check_prometheus_url("http://Prom:9090/").base == "http://prom:9090"
    assert check_prometheus_url("https://[::1]:9090/prometheus/").base == "https://[::1]:9090/prometheus"


# -- from the command line --------------------------------------------------------------------------------

def _kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose API server is never reached: Prometheus is read first."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.mark.parametrize("command", ["top", "advise"])
def test_the_commands_exit_5_naming_an_unreachable_prometheus(command: str, closed_port: str, tmp_path: Path,
                                                              isolated_env: dict[str, str]) -> None:
    started = time.monotonic()
    proc = run_gpuctl("--kubeconfig", str(_kubeconfig(tmp_path)), command, "--prometheus", closed_port,
                      env={**isolated_env, "GPUCTL_REQUEST_TIMEOUT": "2"}, timeout=60)
    assert time.monotonic() - started < 20
    assert proc.returncode == ExitCode.CLUSTER, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: cannot connect to Prometheus at " + closed_port)


@pytest.mark.slow  # a real request deadline, in a gpuctl process
def test_a_silent_prometheus_ends_top_with_exit_7(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    with hanging_server() as url:
        started = time.monotonic()
        proc = run_gpuctl("--kubeconfig", str(_kubeconfig(tmp_path)), "top", "--prometheus", url,
                          env={**isolated_env, "GPUCTL_REQUEST_TIMEOUT": "1"}, timeout=60)
        took = time.monotonic() - started
    assert proc.returncode == ExitCode.TIMEOUT, proc.stderr
    assert url in proc.stderr and "Traceback" not in proc.stderr
    assert took < 15, took


@pytest.mark.parametrize("args,field", [
    (["top", "--prometheus", "ftp://x"], "--prometheus"),
    (["advise", "--prometheus", "http://"], "--prometheus"),
    (["top", "--since", "5x"], "--since"),
    (["top", "--since", "10s"], "--since"),
    (["advise", "--since", "1y"], "--since"),
    (["top", "--nodegroup", "Bad_Name"], "--nodegroup"),
    (["top", "--tenant", "kube-system"], "--tenant"),
])
@pytest.mark.slow  # gpuctl processes, one a case
def test_bad_inputs_exit_2_naming_the_flag(args: list[str], field: str, tmp_path: Path,
                                           isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("--kubeconfig", str(_kubeconfig(tmp_path)), *args, env=isolated_env, timeout=60)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert proc.stderr.startswith(f"error: {field}:"), proc.stderr


def test_the_environment_names_prometheus_and_its_variable_in_errors(tmp_path: Path,
                                                                      isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("--kubeconfig", str(_kubeconfig(tmp_path)), "top",
                      env={**isolated_env, "GPUCTL_PROMETHEUS_URL": "gopher://x"}, timeout=60)
    assert proc.returncode == ExitCode.USAGE and proc.stderr.startswith("error: GPUCTL_PROMETHEUS_URL:"), proc.stderr


def test_without_any_prometheus_the_error_says_how_to_give_one(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    proc = run_gpuctl("--kubeconfig", str(_kubeconfig(tmp_path)), "top", env=isolated_env, timeout=60)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert "--prometheus" in proc.stderr and "GPUCTL_PROMETHEUS_URL" in proc.stderr
