"""Provider-neutral types shared by every provisioner.

The autoscaler only ever sees these types: an `Instance` snapshot listed from the cloud, a
`LaunchRequest` it wants fulfilled, and one error taxonomy. Each cloud module maps its SDK's
errors onto `ProvisionerError` subclasses in exactly one place, so the autoscaler can decide
"block this zone", "block this type", "back off", "stop and tell the admin" without knowing
which cloud it talks to.

Every instance carries three tags/labels (`TAG_CLUSTER`, `TAG_POOL`, `TAG_REQUEST`). The
autoscaler finds its instances again by these tags on every tick and treats the cloud as the
truth, which is what makes reconciliation leak-proof across master restarts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from controlplane.state.instance import InstanceState

F = TypeVar("F")

TAG_CLUSTER = "det-cluster-id"
TAG_POOL = "det-pool"
TAG_REQUEST = "det-launch-request"



@dataclass(frozen=True)
class Instance:
    """One cloud instance as listed this tick (a snapshot, never mutated)."""

    instance_id: str
    name: str
    state: InstanceState
    zone: str
    instance_type: str
    spot: bool
    launched_at: float  # unix seconds
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def launch_request(self) -> str | None:
        """The launch request that created this instance, read back from its tag."""
        return self.tags.get(TAG_REQUEST)


@dataclass(frozen=True)
class LaunchRequest:
    """Launch exactly `count` instances of one type in one zone (None: the provider picks).

    Failover across zones/types and spot->on-demand fallback are the autoscaler's job: it
    issues a new request per attempt, so each error names the zone/type that failed.
    """

    request_id: str
    cluster_id: str
    pool: str
    count: int
    instance_type: str
    zone: str | None
    spot: bool
    user_data: str


class ProvisionerError(Exception):
    """Base of the one error taxonomy; `provider_message` is the SDK's own text, shown to users."""

    kind: str = "error"

    def __init__(
        self,
        provider_message: str,
        *,
        zone: str | None = None,
        instance_type: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(provider_message)
        self.provider_message = provider_message
        self.zone = zone
        self.instance_type = instance_type
        self.code = code  # the provider's error code, e.g. "InsufficientInstanceCapacity"

    def __str__(self) -> str:
        where = ", ".join(
            f"{k}={v}" for k, v in (("zone", self.zone), ("instance_type", self.instance_type)) if v
        )
        code = f"{self.code}: " if self.code else ""
        return f"{self.kind}: {code}{self.provider_message}" + (f" ({where})" if where else "")


class NoCapacity(ProvisionerError):
    """The zone has no capacity for this type (or spot market): try another zone/type/on-demand."""

    kind = "no_capacity"


class QuotaExceeded(ProvisionerError):
    """An account/project quota blocks the launch: waiting or another type may help, retrying won't."""

    kind = "quota_exceeded"


class Transient(ProvisionerError):
    """Throttling, 5xx, network: retry the same request later with backoff."""

    kind = "transient"


class InvalidConfig(ProvisionerError):
    """The pool's configuration is wrong (image, subnet, type): retrying is pointless until fixed."""

    kind = "invalid_config"


class Fatal(ProvisionerError):
    """Credentials or permissions: nothing in this pool can succeed until an admin acts."""

    kind = "fatal"


@runtime_checkable
class Provisioner(Protocol):
    """The same three functions for every cloud. Implementations are synchronous; async
    callers use `asyncio.to_thread`."""

    def launch(self, req: LaunchRequest) -> list[Instance]: ...

    def list_instances(self, cluster_id: str, pool: str) -> list[Instance]: ...

    def terminate(self, instance_ids: list[str]) -> None: ...


def instance_tags(req: LaunchRequest) -> dict[str, str]:
    """The tags every launched instance must carry so it is found again by tag."""
    return {TAG_CLUSTER: req.cluster_id, TAG_POOL: req.pool, TAG_REQUEST: req.request_id}


_LABEL_BAD = re.compile(r"[^a-z0-9_-]+")


def sanitize_label(value: str, *, max_len: int = 63) -> str:
    """GCE label values allow only lowercase letters, digits, '_' and '-', at most 63 chars.

    The mapping is deterministic, so listing by a sanitized value finds what launch wrote.
    """
    return _LABEL_BAD.sub("-", value.lower())[:max_len]


def validate_request(req: LaunchRequest) -> None:
    """Reject requests no provider could fulfil, before any API call."""
    if req.count < 1:
        raise InvalidConfig(f"launch count must be >= 1, got {req.count}")
    if not req.request_id or not req.cluster_id or not req.pool:
        raise InvalidConfig("request_id, cluster_id and pool must be non-empty")


Where = dict[str, str | None]  # zone and instance_type, for the error's message


def error_mapper(parse: Callable[[BaseException], F | None],
                 from_failure: Callable[[F, Where], ProvisionerError]) -> Callable[..., ProvisionerError]:
    """One cloud's ``map_error(exc, zone=..., instance_type=...)``: ProvisionerErrors pass; what the
    SDK parser (``controlplane.common.<cloud>_errors.parse``) reads goes to ``from_failure``; anything
    else is not the SDK's: a local OS error is worth a retry, any other is a bug."""

    def map_error(exc: BaseException, *, zone: str | None = None,
                  instance_type: str | None = None) -> ProvisionerError:
        if isinstance(exc, ProvisionerError):
            return exc
        where: Where = {"zone": zone, "instance_type": instance_type}
        failure = parse(exc)
        if failure is not None:
            return from_failure(failure, where)
        if isinstance(exc, OSError):
            return Transient(f"{type(exc).__name__}: {exc}", code=type(exc).__name__, **where)
        return Fatal(f"{type(exc).__name__}: {exc}", **where)

    return map_error


def translator(map_error: Callable[..., ProvisionerError]) -> Callable[..., AbstractContextManager[None]]:
    """A `translated(zone=..., instance_type=...)` context manager for one SDK's `map_error`:
    SDK errors leave it as ProvisionerErrors (the SDK's exception kept as the cause)."""

    @contextmanager
    def translated(*, zone: str | None = None, instance_type: str | None = None) -> Iterator[None]:
        try:
            yield
        except ProvisionerError:
            raise
        except Exception as exc:  # classification is the point
            raise map_error(exc, zone=zone, instance_type=instance_type) from exc

    return translated
