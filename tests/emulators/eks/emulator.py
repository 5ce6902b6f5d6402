"""The EKS test bed: moto's server over HTTP, sim clusters as its data plane, EKS token authentication.

Everything runs in the test process on 127.0.0.1: moto's ThreadedMotoServer (port 0), the
TokenWebhook, and the data-plane threads; gpuctl, run as a subprocess, reaches moto through
AWS_ENDPOINT_URL and the sim kube-apiservers through the kubeconfig it writes.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.emulators.eks import addons
from tests.emulators.eks.dataplane import SimDataPlane
from tests.emulators.eks.webhook import TokenWebhook

# The identity gpuctl uses against moto; only the webhook knows the secret besides gpuctl.
ACCESS_KEY_ID = "AKIAGPUCTLEMULATOR01"
SECRET_ACCESS_KEY = "gpuctl-emulator-secret-0123456789abcdef"
# What the CLI must not pick up from the developer's machine.
AMBIENT_AWS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
               "AWS_DEFAULT_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
               "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")


def _caller_arn(access_key_id: str, region: str) -> str:
    """GetCallerIdentity, answered by moto's STS backend in this process."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sts.models import sts_backends

    return sts_backends[DEFAULT_ACCOUNT_ID]["global"].get_caller_identity(access_key_id, region)[1]


class EksEmulator:
    """Use as a context manager; `env()` gives the environment for gpuctl."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.endpoint = ""
        self._server: Any = None
        self.webhook: TokenWebhook | None = None
        self.dataplane: SimDataPlane | None = None
        self._saved_env: str | None = None

    def __enter__(self) -> EksEmulator:
        from moto.server import ThreadedMotoServer

        # Node roles attach AWS managed policies, which moto knows only when asked to load them.
        self._saved_env = os.environ.get("MOTO_IAM_LOAD_MANAGED_POLICIES")
        os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # request lines: noise
        addons.install()  # the EKS add-on API, which moto lacks
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.webhook = TokenWebhook(self.endpoint, {ACCESS_KEY_ID: SECRET_ACCESS_KEY}, _caller_arn)
        self.webhook.start()
        self.dataplane = SimDataPlane(self.webhook, self.workdir)
        self.dataplane.install()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.dataplane:
            self.dataplane.wait_idle()
            self.dataplane.uninstall()
            self.dataplane.delete_sim_clusters()
        if self.webhook:
            self.webhook.stop()
        if self._server:
            urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"))
            self._server.stop()
        if self._saved_env is None:
            os.environ.pop("MOTO_IAM_LOAD_MANAGED_POLICIES", None)
        else:
            os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = self._saved_env

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with the emulator's endpoint and credentials, and no AWS setting of the host."""
        env = {k: v for k, v in base.items() if k not in AMBIENT_AWS}
        env.update(AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=ACCESS_KEY_ID,
                   AWS_SECRET_ACCESS_KEY=SECRET_ACCESS_KEY, AWS_EC2_METADATA_DISABLED="true",
                   AWS_CONFIG_FILE=str(self.workdir / "no-aws-config"),
                   AWS_SHARED_CREDENTIALS_FILE=str(self.workdir / "no-aws-credentials"))
        return env

    def client(self, service: str, region: str = "us-east-1") -> Any:
        """A boto3 client on the emulator, for a test to look at what gpuctl made."""
        import boto3

        return boto3.client(service, region_name=region, endpoint_url=self.endpoint,
                            aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY)
