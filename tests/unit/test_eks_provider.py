"""EksProvider without AWS: error translation, lazy boto3, input checks, the kubeconfig it writes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gpuctl.model.cloud_options import CloudOptions
from gpuctl.providers.eks.aws import MAX_ATTEMPTS, AwsSession, translated
from gpuctl.providers.eks.provider import EksProvider
from gpuctl.util.errors import CloudError, CredentialsError, ExitCode, GpuctlError, UsageError
from tests.unit.aws_isolation import isolate_aws


def _client_error(code: str, message: str = "msg") -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, "CreateCluster")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    isolate_aws(monkeypatch, tmp_path)


@pytest.mark.parametrize(("raised", "kind", "text"), [
    (_client_error("InvalidClientTokenId", "The security token included in the request is invalid."),
     CredentialsError, "AWS rejected the credentials (InvalidClientTokenId)"),
    (_client_error("SignatureDoesNotMatch", "secret-looking details"), CredentialsError,
     "AWS rejected the credentials (SignatureDoesNotMatch)"),
    (_client_error("ThrottlingException", "Rate exceeded"), CloudError,
     f"AWS throttled the request (ThrottlingException) {MAX_ATTEMPTS} times"),
    (_client_error("ResourceLimitExceededException", "You've reached your quota of clusters."), CloudError,
     "creating it failed: ResourceLimitExceededException: You've reached your quota of clusters."),
    # a Kubernetes minor EKS does not offer yet (README: the version the cloud offers)
    (_client_error("InvalidParameterException", "unsupported Kubernetes version 1.99"), CloudError,
     "creating it failed: InvalidParameterException: unsupported Kubernetes version 1.99"),
])
def test_client_errors_are_translated(raised: Exception, kind: type[GpuctlError], text: str) -> None:
    with pytest.raises(kind) as error, translated("creating it"):
        raise raised
    assert text in error.value.message
    assert "secret-looking" not in error.value.one_line()
    assert error.value.exit_code == (ExitCode.CREDENTIALS if kind is CredentialsError else ExitCode.CLOUD)


def test_sdk_errors_are_translated() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, ProfileNotFound

    with pytest.raises(CredentialsError, match="no usable AWS credentials"), translated("x"):
        raise NoCredentialsError()
    with pytest.raises(CredentialsError, match="AWS profile 'dev' not found"), translated("x"):
        raise ProfileNotFound(profile="dev")
    with pytest.raises(CloudError, match="cannot reach http://127.0.0.1:9"), translated("x"):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")


def test_clients_retry_throttling_in_standard_mode(aws_env: None) -> None:
    client = AwsSession(None, "us-east-1").client("eks")
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}


def test_no_region_is_a_usage_error(aws_env: None) -> None:
    with pytest.raises(UsageError, match="--region: no AWS region given"):
        EksProvider(CloudOptions()).check_credentials()


def test_inputs_are_checked_when_the_provider_is_made() -> None:
    with pytest.raises(UsageError, match="--ami-type"):
        EksProvider(CloudOptions(ami_type="AL2_x86_64"))
    with pytest.raises(UsageError, match="--node-role: 'nodes' is not an IAM role ARN"):
        EksProvider(CloudOptions(node_role="nodes"))


def test_the_provider_module_does_not_import_boto3() -> None:
    probe = ("import sys; from gpuctl.providers import get_provider; from gpuctl.model.cloud_options import CloudOptions;"
             "get_provider('eks', CloudOptions(region='us-east-1'));"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'boto3', 'botocore'}))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def _provider_with_cluster(options: CloudOptions) -> EksProvider:
    from botocore.stub import Stubber

    provider = EksProvider(options)
    eks = provider.aws.client("eks")
    stubber = Stubber(eks)
    described: dict[str, Any] = {"cluster": {"name": "prod", "status": "ACTIVE", "endpoint": "https://prod.example",
                                             "certificateAuthority": {"data": "Q0E="}}}
    stubber.add_response("describe_cluster", described, {"name": "prod"})
    stubber.activate()
    return provider


def test_kubeconfig_runs_gpuctls_token_plugin(aws_env: None) -> None:
    doc = _provider_with_cluster(CloudOptions(region="eu-west-1", profile=None)).kubeconfig("prod")
    assert doc["current-context"] == "gpuctl-eks-prod"
    assert doc["clusters"] == [{"name": "gpuctl-eks-prod", "cluster": {"server": "https://prod.example",
                                                                       "certificate-authority-data": "Q0E="}}]
    assert doc["users"] == [{"name": "gpuctl-eks-prod", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": ["-m", "gpuctl.providers.eks.token", "--cluster", "prod", "--region", "eu-west-1"],
        "interactiveMode": "Never"}}}]


def test_exec_auth_kubeconfig_runs_the_aws_cli(aws_env: None) -> None:
    doc = _provider_with_cluster(CloudOptions(region="eu-west-1", exec_auth=True)).kubeconfig("prod")
    assert doc["users"][0]["user"]["exec"] == {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
        "args": ["eks", "get-token", "--cluster-name", "prod", "--region", "eu-west-1", "--output", "json"],
        "interactiveMode": "Never"}


@pytest.mark.parametrize("service", ["sts", "eks"])
def test_a_5xx_with_a_json_body_exits_4(aws_env: None, monkeypatch: pytest.MonkeyPatch, service: str) -> None:
    """STS speaks XML and EKS JSON: a failing endpoint answering JSON must not crash either (exit 1)."""
    import http.server
    import threading

    from gpuctl.providers.eks import aws

    class Failing(http.server.BaseHTTPRequestHandler):
        def _fail(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"message": "internal failure", "code": "InternalFailure"}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _fail

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(aws, "MAX_ATTEMPTS", 1)  # the retries are botocore's; one answer is enough here
    try:
        client = AwsSession(None, "us-east-1").client(service)
        call = client.get_caller_identity if service == "sts" else client.list_clusters
        with pytest.raises(CloudError) as error, translated("asking AWS"):
            call()
    finally:
        server.shutdown()
    assert error.value.exit_code == ExitCode.CLOUD
    assert error.value.one_line().startswith("asking AWS failed")
