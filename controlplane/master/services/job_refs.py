"""What names a job in a request: its full id, a unique prefix of at least 8 characters (the
short ids `det job list` shows), or an experiment id. A job is an experiment or a row of
``pai_jobs`` (an OpenPAI job, a command, a shell, a notebook): ids and prefixes are looked up in
both, and a prefix that matches jobs of both tables is as ambiguous as one matching two experiments.

Job ids are UUIDs; nobody types 36 characters, so, as with git's abbreviated hashes, a prefix names
a job when only one job's id starts with it. Eight characters keep a typo from silently naming
some other job (two random ids share 8 hex characters about once in four billion). Every answer
still carries the full id.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Experiment, PaiJob
from controlplane.master.errors import BadRequest, NotFound

MIN_PREFIX = 8
MAX_CANDIDATES = 5  # named in an "ambiguous" answer; the rest are counted as "more"
MAX_EXPERIMENT_ID = 2**31 - 1


def _experiment_id(ref: str) -> int | None:
    """The CLI also accepts an experiment id for a job."""
    if ref.isascii() and ref.isdigit() and len(ref) <= 10 and int(ref) <= MAX_EXPERIMENT_ID:
        return int(ref)
    return None


def ambiguity(field: str, ref: str, candidates: list[str]) -> str:
    shown = ", ".join(sorted(candidates)[:MAX_CANDIDATES])
    more = " and more" if len(candidates) > MAX_CANDIDATES else ""
    return f"{field}: job id prefix {ref!r} is ambiguous: it matches {shown}{more}; give more characters"


async def resolve(session: AsyncSession, ref: str, field: str) -> Experiment | PaiJob:
    """The experiment or PAI job row whose job ``ref`` names; a 400 naming ``field`` for a prefix
    that is too short or names several jobs, a 404 when nothing matches."""
    job: Experiment | PaiJob | None = await session.scalar(select(Experiment).where(Experiment.job_id == ref))
    if job is None:
        job = await session.scalar(select(PaiJob).where(PaiJob.job_id == ref))
    if job is not None:
        return job
    if len(ref) >= MIN_PREFIX:
        # LIKE with the wildcards escaped: a prefix match whatever the column's collation.
        matches: list[Experiment | PaiJob] = [
            *(await session.scalars(select(Experiment).where(Experiment.job_id.startswith(ref, autoescape=True))
                                    .order_by(Experiment.job_id).limit(MAX_CANDIDATES + 1))).all(),
            *(await session.scalars(select(PaiJob).where(PaiJob.job_id.startswith(ref, autoescape=True))
                                    .order_by(PaiJob.job_id).limit(MAX_CANDIDATES + 1))).all()]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise BadRequest(ambiguity(field, ref, [m.job_id for m in matches]))
    exp_id = _experiment_id(ref)
    if exp_id is not None:
        exp = await session.get(Experiment, exp_id)
        if exp is not None:
            return exp
    if len(ref) < MIN_PREFIX:
        # Digits may have meant a job id's first characters: say what would name it.
        no_experiment = f"no experiment has id {exp_id}, and " if exp_id is not None else ""
        raise BadRequest(f"{field}: {no_experiment}{ref!r} is too short to name a job: give its full id or at "
                         f"least {MIN_PREFIX} of its first characters")
    raise NotFound(f"{field}: job {ref} not found")
