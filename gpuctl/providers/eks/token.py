"""EKS bearer tokens without the aws CLI, and the exec credential plugin that serves them.

A token is a presigned STS GetCallerIdentity URL (GET, valid 60 s to presign) with the header
`x-k8s-aws-id: <cluster>` signed in, so it proves the caller's identity to that cluster only:
`k8s-aws-v1.` + urlsafe base64 of the URL, without padding. EKS accepts it for 15 minutes.

`python -m gpuctl.providers.eks.token --cluster NAME --region REGION [--profile P]` prints an
ExecCredential, the way `aws eks get-token` does: the kubeconfig gpuctl writes names this command
instead of embedding a token, so it holds no secret and does not change from run to run.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from gpuctl.providers.eks.aws import AwsSession, translated
from gpuctl.util import redact
from gpuctl.util.errors import GpuctlError

if TYPE_CHECKING:
    from botocore.client import BaseClient

PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_S = 60
# EKS honours a token for 15 minutes after signing; clients refresh a minute before (as aws-cli).
TOKEN_LIFETIME = timedelta(minutes=14)
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


def presigned_url(sts: BaseClient, cluster: str) -> str:
    """Presign GetCallerIdentity with `x-k8s-aws-id: cluster` among the signed headers."""

    def keep_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        # Not an STS parameter: move it out of the validated params before serialisation.
        if CLUSTER_ID_HEADER in params:
            context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)

    def add_cluster_id(request: Any, **_: Any) -> None:
        if CLUSTER_ID_HEADER in request.context:
            request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]

    events = sts.meta.events
    events.register("provide-client-params.sts.GetCallerIdentity", keep_cluster_id)
    events.register("before-sign.sts.GetCallerIdentity", add_cluster_id)
    try:
        return sts.generate_presigned_url("get_caller_identity", Params={CLUSTER_ID_HEADER: cluster},
                                          ExpiresIn=PRESIGN_EXPIRES_S, HttpMethod="GET")
    finally:
        events.unregister("provide-client-params.sts.GetCallerIdentity", keep_cluster_id)
        events.unregister("before-sign.sts.GetCallerIdentity", add_cluster_id)


def encode_token(url: str) -> str:
    return PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def get_token(sts: BaseClient, cluster: str) -> str:
    """A bearer token for `cluster`, signed with the STS client's credentials (registered for redaction)."""
    url = presigned_url(sts, cluster)
    token = encode_token(url)
    redact.register(token, url)
    return token


def exec_credential(token: str, now: datetime | None = None) -> dict[str, Any]:
    """The ExecCredential a client-go exec plugin prints."""
    expires = (now or datetime.now(timezone.utc)) + TOKEN_LIFETIME
    return {"kind": "ExecCredential", "apiVersion": EXEC_API_VERSION, "spec": {},
            "status": {"expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "token": token}}


def main(argv: list[str] | None = None) -> int:
    """The exec plugin: the credential on stdout for kubectl/helm/gpuctl, one-line errors on stderr."""
    parser = argparse.ArgumentParser(prog="python -m gpuctl.providers.eks.token",
                                     description="Print an EKS ExecCredential (kubeconfig exec plugin).")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--profile")
    args = parser.parse_args(argv)
    try:
        sts = AwsSession(args.profile, args.region).client("sts")
        with translated("signing an EKS token"):
            token = get_token(sts, args.cluster)
    except GpuctlError as exc:
        print(f"error: {redact.redact(exc.one_line())}", file=sys.stderr)
        return int(exc.exit_code)
    print(json.dumps(exec_credential(token)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
