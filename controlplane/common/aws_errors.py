"""The one place that reads botocore's (and s3transfer's) exceptions: what AWS said, or what failed here.

Each user of AWS turns a parsed `AwsFailure` into its own taxonomy: the provisioners
(`provisioners/ec2_errors.py`: which failover to take), checkpoint storage
(`controlplane/storage/s3_errors.py`: which sentence a user reads) and `det deploy aws`'s preflight and
teardown (the provider's words as they are). None of them looks into ``exc.response`` or botocore's
classes itself. botocore is imported lazily, so importing this stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FailureKind = Literal["api", "credentials", "request", "unreachable", "sdk"]


@dataclass(frozen=True)
class AwsFailure:
    """``kind``: "api" (AWS answered with an error), "credentials" (none usable here), "request" (the
    SDK refused to build the call: no region, a bad parameter), "unreachable" (no answer: connection,
    timeout, retries exhausted) or "sdk" (any other botocore failure)."""

    kind: FailureKind
    code: str  # AWS's error code ("NoSuchKey", "InsufficientInstanceCapacity"); the class name when not "api"
    message: str  # the provider's own words (users search for them)
    status: int | None = None  # the HTTP status of an "api" failure

    def describe(self) -> str:
        """The message and its code: "The security token ... is invalid. (InvalidClientTokenId)"."""
        if self.kind == "api" and self.code and self.code not in self.message:
            return f"{self.message} ({self.code})"
        return self.message


def parse(exc: BaseException) -> AwsFailure | None:
    """What ``exc`` says when it is an AWS SDK failure; None for anything else (a local file error,
    a bug), which each caller re-raises or classifies as its own."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {}) or {}
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(error.get("Code") or "")
        text = str(error.get("Message") or code or exc).strip()
        return AwsFailure("api", code, text, int(status) if status is not None else None)
    name = type(exc).__name__
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
        return AwsFailure("credentials", name, str(exc))
    if isinstance(exc, (bx.NoRegionError, bx.ParamValidationError)):
        return AwsFailure("request", name, str(exc))
    # botocore's ConnectionError covers EndpointConnectionError and connect timeouts; HTTPClientError
    # covers ConnectionClosedError and read timeouts; s3transfer gives up with RetriesExceededError.
    unreachable = (bx.ConnectionError, bx.HTTPClientError, ConnectionError, TimeoutError)
    if isinstance(exc, unreachable) or _retries_exceeded(exc):
        return AwsFailure("unreachable", name, str(exc).strip() or name)
    if isinstance(exc, bx.BotoCoreError):
        return AwsFailure("sdk", name, str(exc).strip() or name)
    return None


def _retries_exceeded(exc: BaseException) -> bool:
    try:
        from s3transfer.exceptions import RetriesExceededError
    except ImportError:  # s3transfer comes with boto3; botocore alone lacks it
        return False
    return isinstance(exc, RetriesExceededError)


def sdk_errors() -> tuple[type[BaseException], ...]:
    """The exceptions boto3 raises for a failed call: what ``except`` clauses around AWS calls catch."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def describe(exc: BaseException) -> str:
    """The provider's words for ``exc`` (with AWS's code), or the exception's own text."""
    failure = parse(exc)
    return failure.describe() if failure is not None else (str(exc).strip() or type(exc).__name__)
