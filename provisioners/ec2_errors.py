"""The one place where AWS failures become `ProvisionerError`s (read by `controlplane.common.aws_errors`).

Why one place: the autoscaler's failover (block a zone, block a type, back off, stop) depends
entirely on this classification, so it must be reviewed and tested as a single table. Codes
come from the EC2 API error reference; anything unknown falls back to the HTTP status.
"""

from __future__ import annotations

from controlplane.common.aws_errors import AwsFailure, parse
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

# Exact EC2 error codes -> class. Prefix matches (e.g. "InvalidAMIID.NotFound") are below.
_CODES: dict[str, type[ProvisionerError]] = {
    # No capacity in this zone / spot market: try the next zone, type, or on-demand.
    "InsufficientInstanceCapacity": NoCapacity,
    "InsufficientCapacity": NoCapacity,
    "InsufficientHostCapacity": NoCapacity,
    "InsufficientReservedInstanceCapacity": NoCapacity,
    "InsufficientFreeAddressesInSubnet": NoCapacity,
    "SpotMaxPriceTooLow": NoCapacity,
    "MaxSpotInstanceCountExceeded": NoCapacity,
    # Account limits: retrying the same thing will not help; another type may.
    "InstanceLimitExceeded": QuotaExceeded,
    "VcpuLimitExceeded": QuotaExceeded,
    "MaxSpotFleetRequestCountExceeded": QuotaExceeded,
    "VolumeLimitExceeded": QuotaExceeded,
    # Throttling and server trouble: back off and retry.
    "RequestLimitExceeded": Transient,
    "Throttling": Transient,
    "ThrottlingException": Transient,
    "RequestThrottled": Transient,
    "RequestExpired": Transient,
    "InternalError": Transient,
    "InternalFailure": Transient,
    "ServiceUnavailable": Transient,
    "Unavailable": Transient,
    # The pool's configuration is wrong.
    "InvalidParameterValue": InvalidConfig,
    "InvalidParameterCombination": InvalidConfig,
    "InvalidParameter": InvalidConfig,
    "MissingParameter": InvalidConfig,
    "Unsupported": InvalidConfig,
    "UnsupportedOperation": InvalidConfig,
    "InvalidInstanceType": InvalidConfig,
    "InvalidBlockDeviceMapping": InvalidConfig,
    "InvalidUserData.Malformed": InvalidConfig,
    # A request id reused with other parameters: a caller bug, never fixed by retrying.
    "IdempotentParameterMismatch": InvalidConfig,
    # Credentials / permissions / account state: an admin must act.
    "UnauthorizedOperation": Fatal,
    "AuthFailure": Fatal,
    "InvalidClientTokenId": Fatal,
    "SignatureDoesNotMatch": Fatal,
    "ExpiredToken": Fatal,
    "OptInRequired": Fatal,
    "PendingVerification": Fatal,
    "Blocked": Fatal,
    "AccessDenied": Fatal,
}

# "InvalidAMIID.NotFound", "InvalidSubnetID.NotFound", "InvalidGroup.NotFound", ...
_PREFIXES: tuple[tuple[str, type[ProvisionerError]], ...] = (
    ("InvalidAMIID.", InvalidConfig),
    ("InvalidSubnetID.", InvalidConfig),
    ("InvalidSubnet.", InvalidConfig),
    ("InvalidGroup.", InvalidConfig),
    ("InvalidGroupId.", InvalidConfig),
    ("InvalidKeyPair.", InvalidConfig),
    ("InvalidSecurityGroupID.", InvalidConfig),
    ("InvalidIamInstanceProfile.", InvalidConfig),
    ("InvalidAvailabilityZone", InvalidConfig),
    ("InvalidPlacementGroup.", InvalidConfig),
    ("InvalidNetworkInterfaceID.", InvalidConfig),
)


def class_for_code(code: str, http_status: int | None = None) -> type[ProvisionerError]:
    """Classify one EC2 error code; unknown codes fall back to the HTTP status."""
    if code in _CODES:
        return _CODES[code]
    for prefix, cls in _PREFIXES:
        if code.startswith(prefix):
            return cls
    if http_status is not None:
        if http_status >= 500 or http_status == 429:
            return Transient
        if http_status in (401, 403):
            return Fatal
    # An unknown 4xx is most likely a request the pool's config produced: don't spin on it.
    return InvalidConfig


def _from_failure(failure: AwsFailure, where: Where) -> ProvisionerError:
    if failure.kind == "api":
        return class_for_code(failure.code, failure.status)(failure.message, code=failure.code or None, **where)
    cls = {"credentials": Fatal, "request": InvalidConfig}.get(failure.kind, Transient)
    return cls(failure.message, code=failure.code, **where)


# Any exception raised by boto3/botocore into the taxonomy (ProvisionerErrors pass).
map_error = error_mapper(parse, _from_failure)

# `with translated(zone=...):` re-raises SDK errors as ProvisionerErrors, keeping the cause.
translated = translator(map_error)
