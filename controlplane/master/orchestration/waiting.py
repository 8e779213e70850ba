"""Why pending work waits, as the last scheduling pass saw it: the planner's reason for each request
it could not place (``Plan.waiting``), or the orchestrator's own when a placed OpenPAI job's ports
could not be booked.

Kept in memory on the orchestrator, never written per pass: a master restart forgets it until the
next pass (half a second later). Read by ``det job list`` (``v1Job.waitingReason``), ``det pai
describe`` (``jobStatus.waitingReason``), the queue page, and a trial's answer. A reason is logged
once when it changes for a job, not on every pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger("controlplane.orchestrator")

MAX_REASON = 500  # characters kept of one reason


class WaitingReasons:
    def __init__(self) -> None:
        self.by_allocation: dict[str, str] = {}  # a trial's allocation id or an OpenPAI job attempt's group id
        self.by_job: dict[str, str] = {}  # job id (the queue's) -> the reason of its first waiting request

    def update(self, reasons: Mapping[str, str], job_of: Mapping[str, str]) -> None:
        """The last pass's reasons (allocation id -> reason), ``job_of`` naming each allocation's job.
        Work no longer listed is no longer waiting."""
        by_job: dict[str, str] = {}
        for alloc_id, reason in reasons.items():
            job = job_of.get(alloc_id)
            if job is not None and job not in by_job:
                by_job[job] = reason[:MAX_REASON]
        for job, reason in by_job.items():
            if self.by_job.get(job) != reason:
                log.info("job %s waits: %s", job, reason)
        self.by_allocation = {a: r[:MAX_REASON] for a, r in reasons.items()}
        self.by_job = by_job

    def clear(self) -> None:
        self.by_allocation = {}
        self.by_job = {}

    def of_job(self, job_id: str) -> str:
        return self.by_job.get(job_id, "")

    def of_allocation(self, allocation_id: str) -> str:
        return self.by_allocation.get(allocation_id, "")
