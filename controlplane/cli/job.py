"""`det job list`, `det job update` and `det job update-batch` (Determined 0.38.1, reference §3).

`list` reads the pools first (`GET /api/v1/resource-pools`) to choose the pool (`-p`, else the
default compute pool) and its scheduler type (the Priority or Weight column), then pages through
`GET /api/v1/job-queues-v2`; its table shows job ids cut to 8 characters (more where two shown ids
share them), which the master accepts wherever a job id goes; `--json` keeps the full ids. Its Type
column is the v1Job type: EXPERIMENT, COMMAND, SHELL, NOTEBOOK, or GENERIC for an OpenPAI job.
`update` sends one `POST /api/v1/job-queues` with one `updates[]` entry whose unused keys are
`null`. `update-batch` checks every operation here, then sends them all in one POST, which the
master applies whole or not at all (Determined's CLI sends one POST per operation, so a failure
half-way left the first ones applied).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from controlplane.cli import render
from controlplane.cli.common import format_number, paged, parse_priority, parse_weight, print_json, session_for
from controlplane.cli.errors import ApiError, CliError
from controlplane.cli.session import Session

FAIR_SHARE = "SCHEDULER_TYPE_FAIR_SHARE"
JOB_PAGE = 100
STATUS = {"STATE_QUEUED": "Queued", "STATE_SCHEDULED": "Scheduled",
          "STATE_SCHEDULED_BACKFILLED": "Scheduled (backfilled)"}


# ---- list -----------------------------------------------------------------------------------
def choose_pool(pools: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    if name is not None:
        for pool in pools:
            if pool.get("name") == name:
                return pool
        raise CliError(f"Pool {name} not found")
    for pool in pools:
        if pool.get("defaultComputePool"):
            return pool
    known = ", ".join(str(p.get("name")) for p in pools) or "none"
    raise CliError(f"no default compute pool found; choose one with --resource-pool (pools: {known})")


def unwrap_job(entry: Any) -> dict[str, Any]:
    """`jobs[]` entries are `{"full": v1Job}` or `{"limited": v1LimitedJob}`."""
    if not isinstance(entry, dict):
        return {}
    for key in ("full", "limited"):
        if isinstance(entry.get(key), dict):
            return entry[key]
    return entry


def _position(job: dict[str, Any], index: int) -> Any:
    ahead = (job.get("summary") or {}).get("jobsAhead")
    if isinstance(ahead, int) and not isinstance(ahead, bool):
        return ahead if ahead >= 0 else "N/A"
    return index


def _status(job: dict[str, Any]) -> str:
    state = str((job.get("summary") or {}).get("state") or "")
    return STATUS.get(state, render.format_state(state).capitalize())


def _slots(job: dict[str, Any]) -> str:
    acquired, needed = job.get("allocatedSlots"), job.get("requestedSlots")
    return f"{acquired if acquired is not None else 0}/{needed if needed is not None else 0}"


SHORT_ID = 8  # the shortest prefix the master takes for a job id


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id cut to the shortest length, at least SHORT_ID, at which the ids shown stay distinct."""
    distinct = set(ids)
    length = SHORT_ID
    while len({i[:length] for i in distinct}) < len(distinct):
        length += 1
    return {i: i[:length] for i in distinct}


def job_name(job: dict[str, Any]) -> str:
    """An experiment's name with its id, as Determined's ``det job list`` shows it: ``mnist (3)``."""
    name = str(job.get("name") or "")
    if job.get("type") == "TYPE_EXPERIMENT" and job.get("entityId"):
        return f"{name} ({job['entityId']})"
    return name


def job_rows(jobs: list[dict[str, Any]], fair_share: bool) -> list[list[Any]]:
    rows = []
    short = short_ids([str(j.get("jobId") or "") for j in jobs])
    for i, j in enumerate(jobs):
        kind = str(j.get("type") or "")
        rows.append([_position(j, i), short[str(j.get("jobId") or "")],
                     kind[len("TYPE_"):] if kind.startswith("TYPE_") else kind,
                     job_name(j), format_number(j.get("weight") if fair_share else j.get("priority")),
                     render.format_time(j.get("submissionTime")), _slots(j), _status(j), j.get("username", "")])
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    session = session_for(args)
    pools = list(session.get("/api/v1/resource-pools").get("resourcePools") or [])
    pool = choose_pool(pools, args.resource_pool)
    params = {"resourcePool": pool.get("name"), "orderBy": "ORDER_BY_DESC" if args.reverse else "ORDER_BY_ASC"}
    jobs = [unwrap_job(e) for e in paged(session, "/api/v1/job-queues-v2", "jobs", params, page_size=JOB_PAGE)]
    if args.json:
        print_json(jobs)
        return 0
    fair_share = pool.get("schedulerType") == FAIR_SHARE
    print(render.table(["#", "ID", "Type", "Job Name", "Weight" if fair_share else "Priority", "Submitted",
                        "Slots (acquired/needed)", "Status", "User"], job_rows(jobs, fair_share)))
    waiting = waiting_lines(jobs)
    if waiting:
        print()
        print("Waiting:")
        print("\n".join(waiting))
    return 0


def waiting_lines(jobs: list[dict[str, Any]]) -> list[str]:
    """One line per job whose work waits, with the scheduler's reason (the master's ``waitingReason``)."""
    short = short_ids([str(j.get("jobId") or "") for j in jobs])
    return [f"  {short[str(j.get('jobId') or '')]}  {j['waitingReason']}" for j in jobs if j.get("waitingReason")]


# ---- update ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueUpdate:
    job_id: str
    field: str  # the v1QueueControl key: priority, weight, resourcePool, aheadOf, behindOf
    value: Any

    def entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"jobId": self.job_id, "priority": None, "weight": None, "resourcePool": None,
                                 "aheadOf": None, "behindOf": None}
        entry[self.field] = self.value
        return entry

    def describe(self) -> str:
        label = {"priority": "priority", "weight": "weight", "resourcePool": "resource pool",
                 "aheadOf": "ahead of", "behindOf": "behind of"}[self.field]
        return f"{label} {format_number(self.value)}"


OPERATIONS = {"priority": "priority", "weight": "weight", "resource-pool": "resourcePool",
              "resource_pool": "resourcePool", "ahead-of": "aheadOf", "ahead_of": "aheadOf",
              "behind-of": "behindOf", "behind_of": "behindOf"}


def make_update(job_id: str, field: str, raw: str, what: str) -> QueueUpdate:
    if not job_id:
        raise CliError(f"{what}: the job id is empty")
    if field == "priority":
        return QueueUpdate(job_id, field, parse_priority(raw, f"{what}: priority"))
    if field == "weight":
        return QueueUpdate(job_id, field, parse_weight(raw, f"{what}: weight"))
    value = str(raw).strip()
    if not value:
        raise CliError(f"{what}: the value is empty")
    if field in ("aheadOf", "behindOf") and value == job_id:
        raise CliError(f"{what}: a job cannot be moved relative to itself")
    return QueueUpdate(job_id, field, value)


def parse_operation(text: str) -> QueueUpdate:
    """`JOB.OP=VALUE`; the job id may itself contain dots (the last one before `=` splits)."""
    target, sep, value = text.partition("=")
    job_id, dot, op = target.rpartition(".")
    if not sep or not dot:
        raise CliError(f"malformed operation {text!r}: expected JOB_ID.OPERATION=VALUE "
                       f"(operations: priority, weight, resource-pool, ahead-of, behind-of)")
    field = OPERATIONS.get(op.strip().lower())
    if field is None:
        raise CliError(f"malformed operation {text!r}: unknown operation {op!r} "
                       f"(operations: priority, weight, resource-pool, ahead-of, behind-of)")
    return make_update(job_id.strip(), field, value, f"operation {text!r}")


BATCH_INDEX = re.compile(r"^updates\[(\d+)\]")


def send_updates(session: Session, updates: list[tuple[str, QueueUpdate]]) -> None:
    """One POST for all of them: the master applies the batch whole or not at all. An error about
    `updates[i]` is told as the operation the user wrote."""
    try:
        session.post("/api/v1/job-queues", {"updates": [u.entry() for _, u in updates]})
    except ApiError as e:
        match = BATCH_INDEX.match(e.message)
        if len(updates) > 1:
            index = int(match.group(1)) if match else -1
            what = f"operation {updates[index][0]!r}: " if 0 <= index < len(updates) else ""
            raise ApiError(f"{what}{e.message} (nothing was changed)", e.status) from None
        raise
    for _, update in updates:
        print(f"Updated job {update.job_id}: {update.describe()}")


def cmd_update(args: argparse.Namespace) -> int:
    for flag, field in (("priority", "priority"), ("weight", "weight"), ("resource_pool", "resourcePool"),
                        ("ahead_of", "aheadOf"), ("behind_of", "behindOf")):
        raw = getattr(args, flag)
        if raw is not None:
            update = make_update(args.job_id, field, raw, f"job {args.job_id}")
            break
    else:  # pragma: no cover - argparse requires one flag
        raise CliError("give one of --priority, --weight, --resource-pool, --ahead-of, --behind-of")
    send_updates(session_for(args), [(args.job_id, update)])
    return 0


def cmd_update_batch(args: argparse.Namespace) -> int:
    updates = [(op, parse_operation(op)) for op in args.operations]  # all checked before any is sent
    send_updates(session_for(args), updates)
    return 0


# ---- parser ---------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("job", aliases=["j"], help="the job queue")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", aliases=["ls"], help="list the jobs of a resource pool, in queue order")
    p.add_argument("-p", "--resource-pool", metavar="POOL", help="the pool (default: the default compute pool)")
    p.add_argument("--reverse", action="store_true", help="the end of the queue first")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("update", help="change one job's priority, weight, pool or queue position")
    p.add_argument("job_id", metavar="JOB_ID", help="the job's id, or its first 8 or more characters")
    one = p.add_mutually_exclusive_group(required=True)
    one.add_argument("--priority", metavar="N", help="priority 1 (highest) to 99 (priority scheduler)")
    one.add_argument("--weight", metavar="W", help="weight > 0 (fair_share scheduler)")
    one.add_argument("--resource-pool", metavar="POOL", help="move the job to this pool")
    one.add_argument("--ahead-of", metavar="JOB_ID", help="queue the job just ahead of this one (at its priority; "
                     "if that one runs and the pool is full, it is preempted for this one)")
    one.add_argument("--behind-of", metavar="JOB_ID", help="queue the job just behind this one")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("update-batch", help="several job updates, applied in order, all or none")
    p.add_argument("operations", metavar="JOB_ID.OPERATION=VALUE", nargs="+",
                   help="operations: priority, weight, resource-pool, ahead-of, behind-of")
    p.set_defaults(func=cmd_update_batch)
