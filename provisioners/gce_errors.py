"""The one place where Compute Engine failures become `ProvisionerError`s (exceptions read by
`controlplane.common.gcp_errors`).

GCE reports failures two ways: an HTTP error raised by the client as a google.api_core
exception, or a zone operation that finishes DONE with `error.errors[].code` set (zone
stockouts arrive this way). Both go through `classify`, so the table is tested once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controlplane.common.gcp_errors import GcpFailure, parse
from provisioners.base import (
    Fatal,
    InvalidConfig,
    NoCapacity,
    ProvisionerError,
    QuotaExceeded,
    Transient,
    Where,
    error_mapper,
    translator,
)

_CAPACITY_MARKERS = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",  # also matches ..._WITH_DETAILS
    "does not have enough resources",
    "RESOURCE_POOL_EXHAUSTED",
    "STOCKOUT",
    "resourcePoolExhausted",
)
_QUOTA_MARKERS = ("QUOTA_EXCEEDED", "quotaExceeded", "Quota '", "quota exceeded", "Quota exceeded")
_RATE_MARKERS = ("rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED")
_FATAL_MARKERS = ("PERMISSION_DENIED", "insufficientPermissions", "accessNotConfigured", "SERVICE_DISABLED")
# Operation error codes seen without an HTTP status.
_INVALID_CODES = frozenset(
    {"RESOURCE_NOT_FOUND", "INVALID_FIELD_VALUE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS",
     "UNSUPPORTED_OPERATION", "CONDITION_NOT_MET", "invalid", "notFound", "alreadyExists"}
)


def classify(status: int | None, reasons: Iterable[str], message: str) -> type[ProvisionerError]:
    """Pick the taxonomy class from an HTTP status, provider reason codes and message text."""
    reasons = list(reasons)
    text = " ".join([*reasons, message])
    if any(m in text for m in _CAPACITY_MARKERS):
        return NoCapacity
    if any(m in text for m in _RATE_MARKERS):
        return Transient  # API request rate, not a resource quota
    if any(m in text for m in _QUOTA_MARKERS):
        return QuotaExceeded
    if any(m in text for m in _FATAL_MARKERS):
        return Fatal
    if status is None:
        return InvalidConfig if any(r in _INVALID_CODES for r in reasons) else Transient
    if status == 429 or status >= 500:
        return Transient
    if status in (401, 403):
        return Fatal
    if status in (400, 404, 409, 412):
        return InvalidConfig  # bad image/network/machine type, or a name clash
    return InvalidConfig


def _from_failure(failure: GcpFailure, where: Where) -> ProvisionerError:
    if failure.kind == "api":
        reasons = failure.reasons
        cls = classify(failure.status, reasons, failure.message)
        return cls(failure.message, code=(reasons[0] if reasons else None), **where)
    if failure.kind == "unreachable":
        return Transient(failure.message, code=failure.name, **where)
    return Fatal(failure.message, code=failure.name, **where)


# Any exception from google-cloud-compute into the taxonomy (ProvisionerErrors pass).
map_error = error_mapper(parse, _from_failure)


def operation_error(
    op: Any, *, zone: str | None = None, instance_type: str | None = None
) -> ProvisionerError | None:
    """The error carried by a finished zone operation, or None if it succeeded."""
    errors = list(getattr(getattr(op, "error", None), "errors", []) or [])
    status = int(getattr(op, "http_error_status_code", 0) or 0) or None
    if not errors and status is None:
        return None
    codes = [str(e.code) for e in errors if getattr(e, "code", "")]
    message = "; ".join(str(e.message) for e in errors if getattr(e, "message", "")) or str(
        getattr(op, "http_error_message", "") or "operation failed"
    )
    cls = classify(status, codes, message)
    return cls(message, code=(codes[0] if codes else None), zone=zone, instance_type=instance_type)


# `with translated(zone=...):` re-raises SDK errors as ProvisionerErrors, keeping the cause.
translated = translator(map_error)
