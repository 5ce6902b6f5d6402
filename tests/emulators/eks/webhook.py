"""A TokenReview webhook for the sim kube-apiserver that authenticates EKS tokens as EKS does.

EKS's authenticator decodes `k8s-aws-v1.<base64 URL>`, checks that the URL is a presigned STS
GetCallerIdentity with `x-k8s-aws-id` signed in and not older than 15 minutes, then calls STS with
that header set to the cluster's id; STS checks the signature and answers with the caller's ARN.
moto neither checks query-string signatures nor routes a presigned GET to STS (its server dispatches
on the Authorization header), so the webhook checks the SigV4 signature itself (with the secret of
the access key, from the keys the emulator hands out), then asks moto's STS backend, in-process, for
the caller's ARN. The user is mapped to `system:masters`, as EKS does for the cluster creator.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
TOKEN_TTL = timedelta(minutes=15)
REVIEW_API = "authentication.k8s.io/v1"


class Rejected(Exception):
    """The token does not prove an identity for this cluster (the reason is logged, not returned)."""


def decode_token(token: str) -> str:
    if not token.startswith(PREFIX):
        raise Rejected("not a k8s-aws-v1 token")
    body = token[len(PREFIX):]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    except ValueError:
        raise Rejected("token is not base64") from None


def check_signature(url: str, cluster: str, secrets: Mapping[str, str], now: datetime) -> tuple[str, str]:
    """Recompute the SigV4 query signature with the cluster id header, as STS would; return the
    access key id and region it was signed with."""
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if query.get("Action") != "GetCallerIdentity":
        raise Rejected("not a GetCallerIdentity request")
    if CLUSTER_ID_HEADER not in query.get("X-Amz-SignedHeaders", "").split(";"):
        raise Rejected(f"{CLUSTER_ID_HEADER} is not signed")
    signed_at = datetime.strptime(query.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    if not timedelta(minutes=-5) <= now - signed_at <= TOKEN_TTL:
        raise Rejected("token expired")
    key_id, _, region, service, _ = query["X-Amz-Credential"].split("/")
    if key_id not in secrets:
        raise Rejected("unknown access key")
    # botocore canonicalises the raw query string: drop only the signature from it.
    unsigned = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature="))
    request = AWSRequest(method="GET", url=parts._replace(query=unsigned).geturl(),
                         headers={CLUSTER_ID_HEADER: cluster})
    request.context["timestamp"] = query["X-Amz-Date"]
    auth = SigV4QueryAuth(Credentials(key_id, secrets[key_id]), service, region, int(query["X-Amz-Expires"]))
    canonical = auth.canonical_request(request)
    if auth.signature(auth.string_to_sign(request, canonical), request) != query.get("X-Amz-Signature"):
        raise Rejected("signature does not match")
    return key_id, region


class TokenWebhook:
    """Serves POST /authenticate/<cluster> on 127.0.0.1 for every sim cluster of the emulator."""

    def __init__(self, sts_endpoint: str, secrets: Mapping[str, str], identify: Callable[[str, str], str]) -> None:
        self.sts_host = urlsplit(sts_endpoint).netloc
        self.secrets = secrets
        self.identify = identify  # (access key id, region) -> ARN, from STS
        self.rejections: list[str] = []  # reasons, for test diagnostics
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def review(self, cluster: str, token: str) -> dict[str, Any]:
        """The TokenReview status for `token` presented to `cluster`."""
        try:
            url = decode_token(token)
            if urlsplit(url).netloc != self.sts_host:
                raise Rejected("not signed for this STS endpoint")
            arn = self.identify(*check_signature(url, cluster, self.secrets, datetime.now(timezone.utc)))
        except (Rejected, KeyError, ValueError) as exc:
            self.rejections.append(f"{type(exc).__name__}: {exc}")
            return {"authenticated": False}
        return {"authenticated": True, "user": {"username": arn, "uid": arn,
                                                "groups": ["system:masters", "system:authenticated"]}}

    def kubeconfig(self, cluster: str, directory: Path) -> Path:
        """The --authentication-token-webhook-config-file for `cluster`'s kube-apiserver."""
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "eks-authenticator",
                             "cluster": {"server": f"{self.url}/authenticate/{cluster}"}}],
               "users": [{"name": "kube-apiserver", "user": {}}],
               "contexts": [{"name": "webhook", "context": {"cluster": "eks-authenticator",
                                                            "user": "kube-apiserver"}}],
               "current-context": "webhook"}
        path = directory / f"{cluster}-token-webhook.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                cluster = urlsplit(self.path).path.rsplit("/", 1)[-1]  # client-go adds ?timeout=
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                status = webhook.review(cluster, review.get("spec", {}).get("token", ""))
                body = json.dumps({"apiVersion": REVIEW_API, "kind": "TokenReview", "status": status}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep tokens out of logs
                pass

        return Handler
