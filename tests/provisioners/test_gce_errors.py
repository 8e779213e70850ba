"""The GCE error table: api_core exceptions and failed operations map to one class each."""

from __future__ import annotations

from typing import Any

import google.api_core.exceptions as gex  # a required dependency: fail loudly if missing
import pytest

from provisioners.base import (
    Fatal,
    InvalidConfig,
    NoCapacity,
    ProvisionerError,
    QuotaExceeded,
    Transient,
)
from provisioners.gce_errors import classify, map_error, operation_error


def _err(cls: Any, message: str, reason: str | None = None) -> Exception:
    errors = [{"reason": reason, "message": message}] if reason else []
    return cls(message, errors=errors)


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (_err(gex.ServiceUnavailable, "ZONE_RESOURCE_POOL_EXHAUSTED: zone us-central1-a"), NoCapacity),
        (_err(gex.BadRequest, "The zone 'z' does not have enough resources available"), NoCapacity),
        (_err(gex.Forbidden, "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0", "quotaExceeded"), QuotaExceeded),
        (_err(gex.Forbidden, "QUOTA_EXCEEDED"), QuotaExceeded),
        (_err(gex.Forbidden, "Rate Limit Exceeded", "rateLimitExceeded"), Transient),
        (_err(gex.TooManyRequests, "slow down"), Transient),
        (_err(gex.ServiceUnavailable, "backend unavailable"), Transient),
        (_err(gex.InternalServerError, "oops"), Transient),
        (_err(gex.BadRequest, "Invalid value for field 'resource.machineType'", "invalid"), InvalidConfig),
        (_err(gex.NotFound, "The resource 'projects/x/global/images/nope' was not found", "notFound"), InvalidConfig),
        (_err(gex.Unauthorized, "Request had invalid authentication credentials"), Fatal),
        (_err(gex.Forbidden, "Required 'compute.instances.create' permission", "forbidden"), Fatal),
        (gex.RetryError("deadline", cause=None), Transient),
        (ConnectionError("refused"), Transient),
    ],
)
def test_exceptions(exc: Exception, cls: type[ProvisionerError]) -> None:
    err = map_error(exc, zone="z1", instance_type="g2-standard-8")
    assert type(err) is cls
    assert err.zone == "z1" and err.instance_type == "g2-standard-8" and err.provider_message


def test_provider_message_is_sdk_text() -> None:
    err = map_error(_err(gex.Forbidden, "Quota 'CPUS' exceeded. Limit: 24.0", "quotaExceeded"))
    assert err.provider_message == "Quota 'CPUS' exceeded. Limit: 24.0" and err.code == "quotaExceeded"


class _E:
    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message


class _Op:
    def __init__(self, status: int, errors: list[_E], message: str = "") -> None:
        self.http_error_status_code, self.http_error_message = status, message

        class _Err:
            pass

        self.error = _Err()
        self.error.errors = errors  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("op", "cls"),
    [
        (_Op(503, [_E("ZONE_RESOURCE_POOL_EXHAUSTED", "no resources")]), NoCapacity),
        (_Op(503, [_E("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "no resources")]), NoCapacity),
        (_Op(403, [_E("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded")]), QuotaExceeded),
        (_Op(0, [_E("RESOURCE_NOT_FOUND", "image not found")]), InvalidConfig),
        (_Op(400, [_E("INVALID_FIELD_VALUE", "bad field")]), InvalidConfig),
        (_Op(0, [_E("SOMETHING_NEW", "eh")]), Transient),
        (_Op(500, [_E("INTERNAL_ERROR", "eh")]), Transient),
    ],
)
def test_operation_errors(op: _Op, cls: type[ProvisionerError]) -> None:
    err = operation_error(op, zone="z")
    assert type(err) is cls and err is not None and err.zone == "z"
    assert err.code == op.error.errors[0].code  # type: ignore[attr-defined]


def test_successful_operation_has_no_error() -> None:
    assert operation_error(_Op(0, [])) is None


def test_classify_falls_back_on_status() -> None:
    assert classify(502, [], "bad gateway") is Transient
    assert classify(401, [], "who are you") is Fatal
    assert classify(409, [], "exists") is InvalidConfig
