"""EKS tokens: a presigned STS GetCallerIdentity, bound to one cluster, encoded as aws-iam-authenticator reads it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

import pytest

from gpuctl.providers.eks.token import PREFIX, exec_credential, get_token
from tests.emulators.eks.webhook import Rejected, check_signature
from tests.unit.aws_isolation import KEY, SECRET


@pytest.fixture
def sts(monkeypatch: pytest.MonkeyPatch, tmp_path):
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    from gpuctl.providers.eks.aws import AwsSession

    return AwsSession(None, "eu-west-1").client("sts")


def _url(token: str) -> str:
    body = token[len(PREFIX):]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def test_token_is_prefixed_urlsafe_base64_without_padding(sts) -> None:
    token = get_token(sts, "prod")
    assert token.startswith("k8s-aws-v1.")
    assert "=" not in token and "+" not in token and "/" not in token
    assert _url(token).startswith("https://sts.eu-west-1.amazonaws.com/?")


def test_presigned_url_is_a_60s_get_caller_identity_with_the_cluster_id_signed(sts) -> None:
    query = parse_qs(urlsplit(_url(get_token(sts, "prod"))).query)
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-SignedHeaders"] == ["host;x-k8s-aws-id"]
    assert query["X-Amz-Credential"][0].startswith(f"{KEY}/")
    assert "x-k8s-aws-id" not in query  # a signed header, not a parameter


def test_token_verifies_for_its_cluster_only(sts) -> None:
    url = _url(get_token(sts, "prod"))
    now = datetime.now(timezone.utc)
    assert check_signature(url, "prod", {KEY: SECRET}, now) == (KEY, "eu-west-1")
    with pytest.raises(Rejected, match="signature does not match"):
        check_signature(url, "staging", {KEY: SECRET}, now)
    with pytest.raises(Rejected, match="signature does not match"):
        check_signature(url, "prod", {KEY: "another-secret"}, now)


def test_exec_credential_expires_before_eks_stops_accepting_the_token() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    credential = exec_credential("k8s-aws-v1.abc", now)
    assert credential == {"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1beta1", "spec": {},
                          "status": {"expirationTimestamp": "2026-01-02T03:18:05Z", "token": "k8s-aws-v1.abc"}}


@pytest.mark.slow  # gpuctl processes
def test_exec_plugin_prints_a_credential_or_exits_3(tmp_path) -> None:
    base = {"PATH": "/usr/bin:/bin", "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    command = [sys.executable, "-m", "gpuctl.providers.eks.token", "--cluster", "prod", "--region", "us-east-1"]
    ok = subprocess.run(command, env=dict(base, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET),
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"]["token"].startswith(PREFIX)
    missing = subprocess.run(command, env=base, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr.startswith("error: no usable AWS credentials")
