"""The priority scheduler for one pool (Determined's priority.go, simplified and made exact).

Order: lower priority number first, then queue position, submission time and allocation id,
so the same inputs always give the same plan.

- A request that fits now is placed (within its job's max_slots).
- A request that could never fit this pool's agents, even idle, does not block: it waits for
  the autoscaler.
- With preemption, a request that does not fit asks running, preemptible work behind it in
  the queue to make room: work of lower priority (numerically greater), or of equal priority
  whose job is further back (queue position, then submission), as Determined's priority.go
  does. So `det job update --ahead-of` a running job of equal priority makes that job give
  way. Victims go lowest priority first, then furthest back in the queue, then newest, and
  only as many as needed. Slots of work already preempting (whatever its priority) count
  first as soon-to-be-free, so it is never asked twice and nothing more is preempted than
  needed. The request is not placed this pass; the slots it will land on are reserved
  (preempt.reserve) so that work behind it cannot take what it is waiting for.
- Otherwise (no preemption, or even all lower-priority work would not make room) the
  request is a blocked head. With preemption, work behind it in the queue that it can preempt
  (preemptible gangs: trials) still takes the free slots of its agents: no slot idles while work
  fits, and the head is not delayed, since as soon as its gang would fit but for that work it
  preempts it (the rule above: that work is behind it). Work it could not take back (a command, a
  notebook, a task group, or work not strictly behind it) gets none of its agents: from that
  request on, every agent a blocked head could ever use is withdrawn from the rest of the pass, as
  it always is without preemption, so backfill there uses only capacity that can never delay it
  (agents too small, or of a size that cannot tile its gang). Several heads add up.
- A task group (``Request.tasks``, an OpenPAI job) is placed whole (Capacity.find_group) or not at
  all. It never preempts: when it does not fit it is a blocked head, holding every agent big
  enough for its smallest slotted task (every agent if all its tasks are zero-slot). A group that
  could never fit the pool's agents, even idle, waits without blocking.
- A request runs only on agents offering its environment (capacity.py's views): "fits",
  "could ever fit", victims and held agents are all judged among those agents. A request whose
  environment no agent offers waits without blocking anyone.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.booking import Booking
from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.environment import Image
from controlplane.scheduler.model import AgentSnapshot, Placement, Plan, PoolPolicy, Preemption, Request, Running
from controlplane.scheduler.preempt import choose_victims, preempting, reserve, soon_free


def order(pending: Sequence[Request]) -> list[Request]:
    return sorted(pending, key=lambda r: (r.priority, r.queue_position, r.submitted_at, r.allocation_id))


def queue_key(work: Request | Running) -> tuple[int, float, float]:
    """A job's place in the queue: smaller runs first."""
    return work.priority, work.queue_position, work.submitted_at


def behind(victim: Running, req: Request) -> bool:
    """Whether the running work is strictly behind the request in the queue (never its own job):
    lower priority, or equal priority and queued later. Ties are not behind, so two jobs in the
    same place never preempt each other."""
    return victim.job_id != req.job_id and queue_key(victim) > queue_key(req)


def victim_order(running: Sequence[Running]) -> list[Running]:
    """Preemptible slotted work not already preempting: lowest priority first, then furthest
    back in the queue, then newest."""
    candidates = [r for r in running if r.resources and r.preemptible and not r.preempting]
    return sorted(candidates, key=lambda r: (-r.priority, -r.queue_position, -r.submitted_at, -r.started_at,
                                             r.allocation_id))


class Reclaiming:
    """The blocked heads of a pass that take back their agents' slots from what is placed behind
    them, and those agents. Heads come in queue order, so the last one's key is the greatest."""

    def __init__(self) -> None:
        self.agents: set[str] = set()
        self._jobs: set[str] = set()
        self._last: tuple[int, float, float] | None = None

    def add(self, head: Request, agents: set[str]) -> None:
        self.agents |= agents
        self._jobs.add(head.job_id)
        self._last = queue_key(head)

    def clear(self) -> None:
        self.agents.clear()
        self._jobs.clear()
        self._last = None

    def could_take_back(self, work: Request) -> bool:
        """Every head could preempt ``work`` once placed: a preemptible gang strictly behind each
        (``behind``), in O(1) however many heads there are."""
        return (work.preemptible and not work.tasks and work.job_id not in self._jobs
                and (self._last is None or queue_key(work) > self._last))


def reason(req: Request, victim: Running) -> str:
    if victim.priority > req.priority:
        return (f"preempted by higher-priority job {req.job_id} (priority {req.priority}; this work has "
                f"priority {victim.priority})")
    return (f"preempted by job {req.job_id}, ahead of this work in the queue at the same priority "
            f"({req.priority})")


def plan_pool(policy: PoolPolicy, pending: Sequence[Request], running: Sequence[Running],
              agents: Sequence[AgentSnapshot], booking: Booking | None = None) -> Plan:
    plan = Plan()
    pool = Capacity(agents, policy.fitting_policy, {r.image for r in pending}, booking)
    job_slots: dict[str, int] = {}
    for r in running:
        job_slots[r.job_id] = job_slots.get(r.job_id, 0) + sum(len(s) for _, s in r.resources)
    candidates = victim_order(running) if policy.preemption else []
    soon = soon_free(running)
    claimed: set[str] = set()  # victims already chosen for an earlier request this pass
    hopeless: set[tuple[Image, int]] = set()  # (environment, gang size) for which no victims sufficed
    reclaiming = Reclaiming()  # blocked heads whose agents work they can preempt may still use
    for req in order(pending):
        n = req.slots_needed
        if n <= 0:  # zero-slot work (a group of zero-slot tasks too) is scheduled separately
            continue  # zero-slot work is scheduled separately (a task group is not: it is placed here)
        if reclaiming.agents and not reclaiming.could_take_back(req):
            pool.exclude(reclaiming.agents)  # work a head could not take back: its agents are withdrawn from here on
            reclaiming.clear()
        if not pool.free:
            break  # every agent is placed on, reserved, or held for a blocked head
        cap = pool.view(req.image)  # the agents offering its environment
        if req.max_slots is not None and job_slots.get(req.job_id, 0) + n > req.max_slots:
            continue  # the job is at its cap: it waits without blocking others
        if req.tasks:  # a task group: all its tasks at once, or it waits; it never preempts
            if not cap.could_ever_fit_request(req):
                continue  # not on these agents, ever: it waits without blocking
            found = cap.find_request(req)
            if found is None:
                cap.exclude(cap.agents_usable_by_request(req))  # a blocked head, as below
                continue
            cap.take_request(req, found)
            job_slots[req.job_id] = job_slots.get(req.job_id, 0) + n
            plan.placements.append(Placement(req.allocation_id, found))
            continue
        if not cap.could_ever_fit(n):
            continue  # not on these agents, ever: leave it to the autoscaler, do not block
        found = cap.find(n)
        if found is not None:
            cap.take(found)
            job_slots[req.job_id] = job_slots.get(req.job_id, 0) + n
            plan.placements.append(Placement(req.allocation_id, found))
            continue
        # Victims and soon-free slots only get fewer and capacity only shrinks during a pass, and
        # requests come in queue order (work behind a later one is behind an earlier one), so a gang
        # size that found no room at some place in the queue finds none further back (per environment).
        if policy.preemption and (req.image, n) not in hopeless:
            eligible = [v for v in candidates if behind(v, req) and v.allocation_id not in claimed]
            found_victims = choose_victims(n, cap, eligible, soon)
            if found_victims is None:
                hopeless.add((req.image, n))
            else:
                victims, where = found_victims
                for v in victims:
                    claimed.add(v.allocation_id)
                    plan.preemptions.append(Preemption(v.allocation_id, reason(req, v)))
                reserve(cap, soon, victims, where, n)  # it waits for those slots; the queue goes on
                plan.waiting[req.allocation_id] = preempting(n, victims)
                job_slots[req.job_id] = job_slots.get(req.job_id, 0) + n
                continue
        if policy.preemption:  # a blocked head that takes back the slots of what is placed behind it
            reclaiming.add(req, cap.agents_usable_by(n))
            continue
        cap.exclude(cap.agents_usable_by(n))  # a blocked head: backfill only where it could never run
    return plan
