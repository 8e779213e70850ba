"""Apply a state change to a row: check the table, record it with its reason."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.master.db.models import Allocation, Experiment, PaiJob, StateTransition, Trial
from controlplane.state.allocation import ALLOCATION
from controlplane.state.experiment import EXPERIMENT
from controlplane.state.pai_job import PAI_JOB
from controlplane.state.trial import TRIAL

_MACHINES = {Experiment: ("experiment", EXPERIMENT), Trial: ("trial", TRIAL), Allocation: ("allocation", ALLOCATION),
             PaiJob: ("pai_job", PAI_JOB)}
Row = Experiment | Trial | Allocation | PaiJob


def record_initial(session: AsyncSession, row: Row, reason: str) -> None:
    entity, _ = _MACHINES[type(row)]
    session.add(StateTransition(entity=entity, entity_id=str(row.id), from_state=None,
                                to_state=row.state, reason=reason, at=utcnow()))


def move(session: AsyncSession, row: Row, to_state: str, reason: str) -> None:
    entity, machine = _MACHINES[type(row)]
    if row.state == to_state:
        return
    machine.check(row.state, to_state)
    session.add(StateTransition(entity=entity, entity_id=str(row.id), from_state=row.state,
                                to_state=to_state, reason=reason, at=utcnow()))
    row.state = to_state
