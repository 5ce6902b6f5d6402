"""The one adaptor to boto3: sessions, clients with retries, and botocore errors as gpuctl errors.

boto3 is imported here, lazily, so nothing that merely imports gpuctl pays for it.
`AWS_ENDPOINT_URL` (and `AWS_ENDPOINT_URL_<SERVICE>`) is honoured by botocore itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gpuctl.util import redact
from gpuctl.util.errors import CloudError, CredentialsError, RequestTimeout, UsageError, WaitTimeout
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.output import info
from gpuctl.util.timeouts import CLOUD_ATTEMPTS, ENV, request_deadlines

if TYPE_CHECKING:
    import boto3
    import botocore.config as botocore_config
    import botocore.exceptions as bx
    import botocore.parsers as botocore_parsers
    from botocore.client import BaseClient
else:
    boto3 = LazyImport("boto3")
    botocore_config = LazyImport("botocore.config", "botocore")
    bx = LazyImport("botocore.exceptions", "botocore")
    botocore_parsers = LazyImport("botocore.parsers", "botocore")

MAX_ATTEMPTS = 8  # per call, first try included: botocore "standard" retries throttling and transient errors
CREDENTIALS_FIX = ("configure AWS credentials (aws configure, AWS_PROFILE or --profile, or AWS_ACCESS_KEY_ID "
                   "and AWS_SECRET_ACCESS_KEY)")
# Codes by which AWS says the credentials themselves are wrong (not that they lack a permission).
CREDENTIAL_CODES = frozenset({"InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException",
                              "InvalidAccessKeyId", "ExpiredToken", "ExpiredTokenException", "AuthFailure",
                              "InvalidSignatureException", "MissingAuthenticationToken"})
THROTTLING_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException",
                              "RequestLimitExceeded", "ThrottledException"})
NOT_FOUND_CODES = frozenset({"ResourceNotFoundException", "NoSuchEntity"})
MANAGED_TAGS = {"gpuctl.dev/managed-by": "gpuctl"}  # on everything gpuctl creates; delete removes only these
POLL_MAX_S = 5.0
PROGRESS_EVERY_S = 30.0


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ('' for anything else)."""
    return (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", "")


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """Turn botocore exceptions raised inside into CredentialsError (3), UsageError (2) or CloudError (4).

    Messages carry AWS's code and message, never a credential: for credential errors only the code.
    """
    try:
        yield
    except (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError) as exc:
        raise CredentialsError(f"no usable AWS credentials ({type(exc).__name__})", CREDENTIALS_FIX) from None
    except bx.ProfileNotFound as exc:
        raise CredentialsError(f"AWS profile {exc.kwargs.get('profile')!r} not found", CREDENTIALS_FIX) from None
    except bx.NoRegionError:
        raise UsageError("--region", "no AWS region given", "pass --region or set AWS_REGION") from None
    except bx.ClientError as exc:
        code = error_code(exc)
        if code in CREDENTIAL_CODES:
            raise CredentialsError(f"AWS rejected the credentials ({code})", CREDENTIALS_FIX) from None
        if code in THROTTLING_CODES:
            raise CloudError(f"{doing} failed: AWS throttled the request ({code}) {MAX_ATTEMPTS} times",
                             "retry later, or ask for a higher API rate quota") from None
        message = exc.response.get("Error", {}).get("Message") or str(exc)
        raise CloudError(f"{doing} failed: {code}: {message}") from None
    except (bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
        deadlines = request_deadlines()
        endpoint = exc.kwargs.get("endpoint_url", "AWS")
        raise RequestTimeout(f"{doing} failed: {endpoint} did not answer within "
                             f"{deadlines.connect if isinstance(exc, bx.ConnectTimeoutError) else deadlines.read:.0f}s "
                             f"({CLOUD_ATTEMPTS} attempts)",
                             f"check the network, --region and AWS_ENDPOINT_URL (request deadline: {ENV})",
                             server=endpoint) from None
    except bx.EndpointConnectionError as exc:
        raise CloudError(f"{doing} failed: cannot reach {exc.kwargs.get('endpoint_url', 'AWS')}",
                         "check the network, --region and AWS_ENDPOINT_URL") from None
    except bx.BotoCoreError as exc:
        raise CloudError(f"{doing} failed: {exc}") from None
    # not a BotoCoreError: e.g. a 5xx with a JSON body from an XML API (STS)
    except botocore_parsers.ResponseParserError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CloudError(f"{doing} failed: AWS answered with a body botocore cannot read ({first})",
                         "AWS or the endpoint (AWS_ENDPOINT_URL) is failing; retry later") from None


class AwsSession:
    """A boto3 session from the standard credential chain, `profile` and `region` overriding it."""

    def __init__(self, profile: str | None, region: str | None) -> None:
        # botocore's DEBUG log carries request headers, session tokens included: never below INFO, even with -vv.
        for name in ("boto3", "botocore"):
            logger = logging.getLogger(name)
            logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))

        with translated("loading the AWS configuration"):
            self._session = boto3.Session(profile_name=profile, region_name=region)
        if not self._session.region_name:
            raise UsageError("--region", "no AWS region given", "pass --region or set AWS_REGION")
        self.region: str = self._session.region_name
        self.partition: str = self._session.get_partition_for_region(self.region)  # aws, aws-cn, aws-us-gov
        self._clients: dict[str, BaseClient] = {}

    def client(self, service: str) -> BaseClient:
        if service not in self._clients:
            deadlines = request_deadlines()
            config = botocore_config.Config(retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
                            connect_timeout=deadlines.connect, read_timeout=deadlines.read)
            with translated(f"creating the {service} client"):
                client = self._session.client(service, config=config)
                self.register_credentials()
            limit_timeout_retries(client)
            self._clients[service] = client
        return self._clients[service]

    def register_credentials(self) -> None:
        """The secret key and session token in use: never printed, whatever AWS echoes."""
        credentials = self._session.get_credentials()
        if credentials is not None:
            frozen = credentials.get_frozen_credentials()
            redact.register(frozen.secret_key, frozen.token)


def limit_timeout_retries(client: BaseClient) -> None:
    """botocore's standard mode retries a timed-out call like a throttled one (MAX_ATTEMPTS times), so a
    frozen endpoint would take minutes: a timeout gets CLOUD_ATTEMPTS attempts, then fails (exit 7)."""
    def stop_on_timeout(attempts: int = 0, caught_exception: BaseException | None = None, **_: Any) -> None:
        if isinstance(caught_exception, (bx.ConnectTimeoutError, bx.ReadTimeoutError)) and attempts >= CLOUD_ATTEMPTS:
            raise caught_exception

    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_first(f"needs-retry.{service}", stop_on_timeout,
                                      unique_id=f"gpuctl-timeout-attempts-{service}")


GONE = "GONE"  # the status wait_for sees once describe() finds nothing


def get_or_none(doing: str, call: Callable[..., dict[str, Any]], **params: Any) -> dict[str, Any] | None:
    """`call(**params)`, or None when AWS says the resource does not exist."""
    with translated(doing):
        try:
            return call(**params)
        except bx.ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                return None
            raise


def health_reason(item: dict[str, Any] | None) -> str:
    """AWS's own words for why a cluster or node group is unhealthy."""
    issues = ((item or {}).get("health") or {}).get("issues") or []
    return "; ".join(f"{i.get('code', '?')}: {i.get('message', '')}".strip() for i in issues) or "no reason given"


def wait_for(what: str, describe: Callable[[], dict[str, Any] | None], until: str, failed: frozenset[str],
             fix: str, timeout: float) -> None:
    """Poll `describe()` (None: gone) until its status is `until` (GONE: until it is gone).

    A status in `failed` raises CloudError with AWS's reason and `fix`; the deadline, WaitTimeout.
    Progress goes to stderr: what is awaited, its status, and for how long.
    """
    started = time.monotonic()
    reported: float | None = None
    delay = 0.5
    while True:
        item = describe()
        status = item["status"] if item else GONE
        if status == until:
            return
        if status in failed:
            raise CloudError(f"{what}: {status}: {health_reason(item)}", fix)
        now = time.monotonic()
        if now - started > timeout:
            raise WaitTimeout(f"{what}: still {status} after {timeout / 60:.0f} min", fix)
        if reported is None or now - reported >= PROGRESS_EVERY_S:
            info(f"  {what}: {status}, {now - started:.0f}s (waiting up to {timeout / 60:.0f} min)")
            reported = now
        time.sleep(delay)
        delay = min(delay * 1.5, POLL_MAX_S)


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    """IAM's spelling of tags."""
    return [{"Key": k, "Value": v} for k, v in tags.items()]
