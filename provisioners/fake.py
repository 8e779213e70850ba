"""In-memory provisioner with scriptable faults, for everything the emulators cannot do.

moto never runs out of capacity and the GCE test endpoint has no clock, so the autoscaler's
failover, backoff, leak reaping and spot handling are tested here: per-zone/type capacity
errors, a quota after N live instances, transient failures for the next K calls, eventual
consistency (launched instances invisible to `list_instances` for a while), instances that
never register, spot interruptions, and logs of every launch and termination. Time comes from
an injected clock so tests never sleep. Thread-safe: the autoscaler calls through to_thread.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from controlplane.state.instance import InstanceState
from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Instance,
    LaunchRequest,
    NoCapacity,
    ProvisionerError,
    QuotaExceeded,
    Transient,
    instance_tags,
    validate_request,
)


class FakeClock:
    """A manual clock: `clock()` reads it, `advance(s)` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass(frozen=True)
class CapacityRule:
    """No capacity where every set field matches (None matches anything)."""

    zone: str | None = None
    instance_type: str | None = None
    spot_only: bool = False

    def matches(self, zone: str, instance_type: str, spot: bool) -> bool:
        return (
            (self.zone is None or self.zone == zone)
            and (self.instance_type is None or self.instance_type == instance_type)
            and (spot or not self.spot_only)
        )


@dataclass
class FakeProvisioner:
    """`Provisioner` whose cloud is a dict. Faults are plain attributes and helper methods."""

    clock: Callable[[], float] = time.time
    zones: list[str] = field(default_factory=lambda: ["fake-a", "fake-b"])
    quota_instances: int | None = None  # QuotaExceeded when live + count would exceed this
    list_delay_s: float = 0.0  # new instances invisible to list for this long (by clock)
    list_delay_calls: int = 0  # ... or for this many list calls
    pending_s: float = 0.0  # "pending" for this long after launch, then "running"
    capacity_rules: list[CapacityRule] = field(default_factory=list)
    never_register: set[str] = field(default_factory=set)  # ids the boot simulator must not register
    never_register_next: int = 0  # mark the next N launched instances as never registering
    # Logs for assertions.
    launched: list[Instance] = field(default_factory=list)
    launch_requests: list[LaunchRequest] = field(default_factory=list)
    failed_launches: list[tuple[LaunchRequest, ProvisionerError]] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._store: dict[str, Instance] = {}
        self._hidden_for_lists: dict[str, int] = {}
        self._faults: dict[str, list[ProvisionerError]] = {"launch": [], "list": [], "terminate": []}

    # -- scripting ------------------------------------------------------------------------

    def no_capacity(self, zone: str | None = None, instance_type: str | None = None, *,
                    spot_only: bool = False) -> None:
        """From now on, launches matching this rule raise NoCapacity."""
        self.capacity_rules.append(CapacityRule(zone, instance_type, spot_only))

    def restore_capacity(self) -> None:
        self.capacity_rules.clear()

    def fail_next(self, k: int, op: str = "launch", error: Callable[[], ProvisionerError] | None = None) -> None:
        """The next `k` calls of `op` ("launch"|"list"|"terminate") raise (Transient by default)."""
        make = error or (lambda: Transient("injected transient failure", code="Injected"))
        with self._lock:
            self._faults[op].extend(make() for _ in range(k))

    def clear_faults(self) -> None:
        """The cloud is healthy again: capacity back, queued failures and listing lag dropped."""
        with self._lock:
            self.capacity_rules.clear()
            self.list_delay_calls = 0
            for queued in self._faults.values():
                queued.clear()

    def interrupt(self, instance_id: str) -> None:
        """A spot interruption: the instance is gone (terminated) without anyone asking."""
        self._set_state(instance_id, "terminated")

    def stop(self, instance_id: str) -> None:
        """Someone stopped the instance (or GCE preempted it to TERMINATED = stopped)."""
        self._set_state(instance_id, "stopped")

    def plant(self, cluster_id: str, pool: str, request_id: str, zone: str = "", instance_type: str = "t1") -> Instance:
        """An instance carrying the cluster's tags appears without this master launching it (a leak
        from a lost launch record or an earlier master), bypassing every scripted fault."""
        with self._lock:
            iid = f"fake-{next(self._ids):06d}"
            inst = Instance(iid, iid, "running", zone or self.zones[0], instance_type, False, self.clock(),
                            {TAG_CLUSTER: cluster_id, TAG_POOL: pool, TAG_REQUEST: request_id})
            self._store[iid] = inst
            return inst

    def registers(self, instance_id: str) -> bool:
        """Whether a boot simulator should register an agent for this instance."""
        return instance_id not in self.never_register

    def all_instances(self) -> list[Instance]:
        """Every instance ever launched, terminated ones included, as it is now."""
        with self._lock:
            return [self._current(i) for i in self._store.values()]

    def live_count(self) -> int:
        with self._lock:
            return sum(1 for i in self._store.values() if i.state != "terminated")

    # -- Provisioner ----------------------------------------------------------------------

    def launch(self, req: LaunchRequest) -> list[Instance]:
        validate_request(req)
        zone = req.zone or self.zones[0]
        with self._lock:
            self.calls.append("launch")
            self.launch_requests.append(req)
            existing = [
                self._current(i) for i in self._store.values()
                if i.tags.get(TAG_REQUEST) == req.request_id and i.state != "terminated"
            ]
            try:
                self._maybe_fail("launch")
                if existing:  # a retried request converges, as on EC2 (ClientToken) and GCE (names)
                    return existing
                self._check_capacity(req, zone)
            except ProvisionerError as err:
                self.failed_launches.append((req, err))
                raise
            now = self.clock()
            out: list[Instance] = []
            for _ in range(req.count):
                iid = f"fake-{next(self._ids):06d}"
                inst = Instance(
                    instance_id=iid, name=iid, state="pending" if self.pending_s > 0 else "running",
                    zone=zone, instance_type=req.instance_type, spot=req.spot, launched_at=now,
                    tags=instance_tags(req),
                )
                self._store[iid] = inst
                self._hidden_for_lists[iid] = self.list_delay_calls
                if self.never_register_next > 0:
                    self.never_register_next -= 1
                    self.never_register.add(iid)
                out.append(inst)
            self.launched.extend(out)
            return out

    def list_instances(self, cluster_id: str, pool: str) -> list[Instance]:
        with self._lock:
            self.calls.append("list")
            self._maybe_fail("list")
            now = self.clock()
            out = []
            for iid, inst in self._store.items():
                if inst.tags.get(TAG_CLUSTER) != cluster_id or inst.tags.get(TAG_POOL) != pool:
                    continue
                if self._hidden_for_lists.get(iid, 0) > 0:
                    self._hidden_for_lists[iid] -= 1
                    continue
                cur = self._current(inst)
                if cur.state == "terminated" or now < inst.launched_at + self.list_delay_s:
                    continue
                out.append(cur)
            return out

    def terminate(self, instance_ids: list[str]) -> None:
        with self._lock:
            self.calls.append("terminate")
            self._maybe_fail("terminate")
            for iid in instance_ids:
                inst = self._store.get(iid)
                if inst is not None and inst.state != "terminated":
                    self._store[iid] = replace(inst, state="terminated")
                    self.terminated.append(iid)

    # -- internals ------------------------------------------------------------------------

    def _maybe_fail(self, op: str) -> None:
        if self._faults[op]:
            raise self._faults[op].pop(0)

    def _check_capacity(self, req: LaunchRequest, zone: str) -> None:
        kw = {"zone": zone, "instance_type": req.instance_type}
        for rule in self.capacity_rules:
            if rule.matches(zone, req.instance_type, req.spot):
                market = "spot " if req.spot else ""
                raise NoCapacity(
                    f"Insufficient {market}capacity for {req.instance_type} in {zone}",
                    code="InsufficientInstanceCapacity", **kw,
                )
        live = sum(1 for i in self._store.values() if i.state != "terminated")
        if self.quota_instances is not None and live + req.count > self.quota_instances:
            raise QuotaExceeded(
                f"Instance quota {self.quota_instances} exceeded ({live} running, {req.count} requested)",
                code="InstanceLimitExceeded", **kw,
            )

    def _current(self, inst: Instance) -> Instance:
        """Pending turns running once `pending_s` has passed on the clock."""
        if inst.state == "pending" and self.clock() >= inst.launched_at + self.pending_s:
            inst = replace(inst, state="running")
            self._store[inst.instance_id] = inst
        return inst

    def _set_state(self, instance_id: str, state: InstanceState) -> None:
        with self._lock:
            inst = self._store[instance_id]
            self._store[instance_id] = replace(inst, state=state)
