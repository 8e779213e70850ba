"""The one place that reads google-api-core's and google-auth's exceptions: what Google said, or what failed here.

Each user of Google Cloud turns a parsed `GcpFailure` into its own taxonomy: the provisioners
(`provisioners/gce_errors.py`, which also reads finished zone operations), checkpoint storage
(`controlplane/storage/gcs_errors.py`) and `det deploy gcp`'s preflight and teardown. None of them
sorts google's exception classes itself. The clients are imported lazily, so importing this stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

FailureKind = Literal["api", "credentials", "unreachable", "sdk"]
_REQUEST_PREFIX = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ")


@dataclass(frozen=True)
class GcpFailure:
    """``kind``: "api" (Google answered with an error status), "credentials" (none usable, or refused
    before any call), "unreachable" (no answer, or retried until the deadline) or "sdk" (another
    client failure)."""

    kind: FailureKind
    name: str  # the exception's class: "NotFound", "Forbidden", "RefreshError"
    message: str  # the provider's own words, without the REST transport's "GET https://...: " prefix
    status: int | None = None  # the HTTP status of an "api" failure
    reasons: tuple[str, ...] = ()  # the API's reason codes: "ZONE_RESOURCE_POOL_EXHAUSTED", "notFound"

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def credentials_refused(self) -> bool:
        """No usable credentials, or Google did not accept them."""
        return self.kind == "credentials" or self.status == 401


def parse(exc: BaseException) -> GcpFailure | None:
    """What ``exc`` says when it is a Google client failure; None for anything else, which each
    caller re-raises or classifies as its own. A retry that ran out reports its last cause."""
    import requests
    from google.api_core import exceptions as gx
    from google.auth import exceptions as ax

    name = type(exc).__name__
    if isinstance(exc, gx.RetryError):
        cause = parse(exc.cause) if exc.cause is not None else None
        return cause or GcpFailure("unreachable", name, message(exc))
    if isinstance(exc, gx.GoogleAPICallError):
        status = exc.code if isinstance(exc.code, int) else None
        return GcpFailure("api", name, message(exc), status, tuple(_reasons_of(exc)))
    if isinstance(exc, (ax.TransportError, requests.ConnectionError, requests.Timeout, ConnectionError,
                        TimeoutError)):
        return GcpFailure("unreachable", name, message(exc))
    if isinstance(exc, ax.GoogleAuthError):
        return GcpFailure("credentials", name, message(exc))
    if isinstance(exc, gx.GoogleAPIError):
        return GcpFailure("sdk", name, message(exc))
    return None


def is_not_found(exc: BaseException) -> bool:
    failure = parse(exc)
    return failure is not None and failure.not_found


def message(exc: BaseException) -> str:
    """The exception's text on one line, the REST transport's request prefix removed."""
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    return _REQUEST_PREFIX.sub("", text) or type(exc).__name__


def _reasons_of(exc: Any) -> list[str]:
    out: list[str] = []
    reason = getattr(exc, "reason", None)
    if reason:
        out.append(str(reason))
    for item in getattr(exc, "errors", None) or []:
        if isinstance(item, dict):
            out.extend(str(item[k]) for k in ("reason", "code") if item.get(k))
    return out


def sdk_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the Google clients raise for a failed call: what ``except`` clauses catch."""
    from google.api_core import exceptions as gx
    from google.auth import exceptions as ax

    return (gx.GoogleAPIError, ax.GoogleAuthError)
