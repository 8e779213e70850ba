"""Launch records: what the master asked the cloud for, stored before it asks, so a restarted
master waits for its own launches instead of taking them for leaks (as Ray's autoscaler v2 keeps
its instance table).

An `instances` row of a launch goes:
- ``requested``: written (and committed) BEFORE `Provisioner.launch`, one per instance of the
  request, under a placeholder id (``requested-<request id>-<n>``), with the request id, type, zone,
  market, price and time;
- the call answers: each placeholder takes the cloud's instance id (its state history moves with
  it), still ``requested``; the call fails (or launched fewer): those rows are deleted, as nothing
  exists behind them (the error shows as the pool's blocked option, backoff and last errors);
- the cloud lists it: its state is the cloud's from then on (the reconciler's "seen in the cloud").
  A listed instance without a row whose launch request still has a placeholder (the master died
  during the call) takes that placeholder;
- not listed within ``max_agent_starting_period`` of its launch: given up (terminated, with the
  reason); should it appear later it is a leak, and terminated.
The ``requested`` rows within that period are the launches in flight: coming capacity to the
planner, and never "gone from the cloud".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.autoscaler import PendingLaunch
from controlplane.common.timeutil import epoch, utcnow
from controlplane.master.db.models import Instance, StateTransition
from controlplane.state import instance as INSTANCE
from provisioners.base import TAG_REQUEST, LaunchRequest
from provisioners.base import Instance as CloudInstance

PLACEHOLDER = "requested-"


def is_placeholder(instance_id: str) -> bool:
    """A row of a launch whose cloud instance id is not known yet."""
    return instance_id.startswith(PLACEHOLDER)


def requested_at(row: Instance, now: float) -> float:
    return epoch(row.launched_at, now)


def record_request(session: AsyncSession, req: LaunchRequest, provider: str, price: float, reason: str,
                   now: float) -> None:
    """The launch's rows, before the cloud is called (the caller commits them first)."""
    for n in range(req.count):
        iid = f"{PLACEHOLDER}{req.request_id}-{n}"
        session.add(Instance(id=iid, pool=req.pool, provider=provider, instance_type=req.instance_type,
                             zone=req.zone or "", spot=req.spot, launch_request_id=req.request_id,
                             state=INSTANCE.REQUESTED, price_per_hour=price,
                             launched_at=datetime.fromtimestamp(now, UTC), reason=reason))
        session.add(StateTransition(entity="instance", entity_id=iid, from_state=None, to_state=INSTANCE.REQUESTED,
                                    reason=f"launch requested: {reason}", at=utcnow()))


async def _placeholders(session: AsyncSession, request_id: str) -> list[Instance]:
    rows = (await session.scalars(select(Instance).where(Instance.launch_request_id == request_id,
                                                         Instance.state == INSTANCE.REQUESTED))).all()
    return sorted((r for r in rows if is_placeholder(r.id)), key=lambda r: r.id)


async def take_id(session: AsyncSession, row: Instance, inst: CloudInstance) -> None:
    """The placeholder is this cloud instance: its id (the history follows), type, zone, market and
    launch time as the cloud says them."""
    old = row.id
    row.id = inst.instance_id
    row.instance_type, row.zone, row.spot = inst.instance_type or row.instance_type, inst.zone, inst.spot
    row.launched_at = datetime.fromtimestamp(inst.launched_at, UTC)
    await session.execute(update(StateTransition).where(StateTransition.entity == "instance",
                                                        StateTransition.entity_id == old)
                          .values(entity_id=inst.instance_id))


async def record_launched(session: AsyncSession, req: LaunchRequest, instances: Sequence[CloudInstance],
                          provider: str, price: float, reason: str) -> None:
    """The cloud answered: the placeholders take its instances' ids; any it did not launch are closed."""
    spare = await _placeholders(session, req.request_id)
    for inst in instances:
        if spare:
            await take_id(session, spare.pop(0), inst)
            continue
        if await session.get(Instance, inst.instance_id) is None:  # more than asked for: recorded all the same
            session.add(Instance(id=inst.instance_id, pool=req.pool, provider=provider,
                                 instance_type=inst.instance_type, zone=inst.zone, spot=inst.spot,
                                 launch_request_id=req.request_id, state=INSTANCE.REQUESTED, price_per_hour=price,
                                 launched_at=datetime.fromtimestamp(inst.launched_at, UTC), reason=reason))
    for row in spare:  # fewer than asked for: nothing exists behind these
        await _forget(session, row)


async def record_failed(session: AsyncSession, request_id: str) -> None:
    """The cloud refused the launch: nothing exists, so its rows go (the error is the pool's
    blocked option, backoff and last errors, in describe)."""
    for row in await _placeholders(session, request_id):
        await _forget(session, row)


async def _forget(session: AsyncSession, row: Instance) -> None:
    await session.execute(delete(StateTransition).where(StateTransition.entity == "instance",
                                                        StateTransition.entity_id == row.id))
    await session.delete(row)


def close(session: AsyncSession, row: Instance, reason: str) -> None:
    """The row ends now (terminated, with why): its bill stops."""
    session.add(StateTransition(entity="instance", entity_id=row.id, from_state=row.state,
                                to_state=INSTANCE.TERMINATED, reason=reason, at=utcnow()))
    row.state = INSTANCE.TERMINATED
    row.terminated_at = utcnow()
    row.reason = reason


async def adopt(session: AsyncSession, rows: dict[str, Instance], listed: Sequence[CloudInstance]) -> None:
    """Listed instances without a row take a placeholder of their launch request (a master that
    died while the cloud was launching them): ``rows`` is updated to the cloud's ids."""
    spare: dict[str, list[Instance]] = {}
    for row in sorted(rows.values(), key=lambda r: r.id):
        if row.state == INSTANCE.REQUESTED and is_placeholder(row.id):
            spare.setdefault(row.launch_request_id, []).append(row)
    for inst in listed:
        waiting = spare.get(inst.tags.get(TAG_REQUEST, ""))
        if inst.instance_id in rows or not waiting:
            continue
        row = waiting.pop(0)
        rows.pop(row.id)
        await take_id(session, row, inst)
        rows[row.id] = row


def in_flight(rows: Sequence[Instance], listed: Sequence[CloudInstance], grace_s: float,
              now: float) -> list[PendingLaunch]:
    """Launches with a row the cloud does not list yet, requested less than ``grace_s`` ago. A
    request's count is its instances listed plus those still awaited (the planner subtracts the
    listed ones)."""
    shown = Counter(i.tags.get(TAG_REQUEST, "") for i in listed)
    awaited: dict[str, list[Instance]] = {}
    for row in rows:
        if row.state == INSTANCE.REQUESTED and now - requested_at(row, now) < grace_s:
            awaited.setdefault(row.launch_request_id, []).append(row)
    return [PendingLaunch(req, len(group) + shown[req], min(requested_at(r, now) for r in group),
                          group[0].instance_type, group[0].zone, group[0].spot)
            for req, group in awaited.items()]
