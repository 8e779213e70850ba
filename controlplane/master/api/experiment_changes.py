"""Determined's experiment and trial changes after create: archive/unarchive, labels, continue,
delete, and killing one trial. Each needs the owner or an admin (``authz.require_owner`` in the
services); state changes go through the orchestrator (``orchestration/user_requests.py``).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import delete, post, put
from litestar.params import Parameter

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.experiments import experiment_answer
from controlplane.master.api.params import ExperimentId, TrialId
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.serializers import V1Experiment
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import user_requests
from controlplane.master.services import experiment_changes as svc

Label = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00]+$", description="the label")]
EXPERIMENT = "/api/v1/experiments/{exp_id:int}"


class LabelsResponse(msgspec.Struct, rename="camel", kw_only=True):
    """PutExperimentLabel and DeleteExperimentLabel's answer: the labels after the change."""

    labels: list[str]


class DeleteExperimentResponse(msgspec.Struct, rename="camel", kw_only=True):
    state: str


class ContinueExperimentResponse(msgspec.Struct, rename="camel", kw_only=True):
    experiment: V1Experiment
    warnings: list[str]  # Determined's v1LaunchWarning values


@post(f"{EXPERIMENT}/archive", operation_id="ArchiveExperiment", opt=opt(Action.EDIT), tags=["experiments"],
      status_code=200)
async def archive(request: AnyRequest, exp_id: ExperimentId) -> EmptyResponse:
    """Only an ended experiment; archived experiments leave ``det e list`` (``--all`` shows them)."""
    await svc.set_archived(runtime_of(request), principal_of(request), exp_id, True)
    return EmptyResponse()


@post(f"{EXPERIMENT}/unarchive", operation_id="UnarchiveExperiment", opt=opt(Action.EDIT), tags=["experiments"],
      status_code=200)
async def unarchive(request: AnyRequest, exp_id: ExperimentId) -> EmptyResponse:
    await svc.set_archived(runtime_of(request), principal_of(request), exp_id, False)
    return EmptyResponse()


@put(f"{EXPERIMENT}/labels/{{label:str}}", operation_id="PutExperimentLabel", opt=opt(Action.EDIT),
     tags=["experiments"], status_code=200)
async def put_label(request: AnyRequest, exp_id: ExperimentId, label: Label) -> LabelsResponse:
    return LabelsResponse(labels=await svc.change_label(runtime_of(request), principal_of(request), exp_id, label,
                                                        True))


@delete(f"{EXPERIMENT}/labels/{{label:str}}", operation_id="DeleteExperimentLabel", opt=opt(Action.EDIT),
        tags=["experiments"], status_code=200)
async def delete_label(request: AnyRequest, exp_id: ExperimentId, label: Label) -> LabelsResponse:
    return LabelsResponse(labels=await svc.change_label(runtime_of(request), principal_of(request), exp_id, label,
                                                        False))


@delete(EXPERIMENT, operation_id="DeleteExperiment", opt=opt(Action.EDIT), tags=["experiments"], status_code=200)
async def delete_experiment(request: AnyRequest, exp_id: ExperimentId) -> DeleteExperimentResponse:
    """An ended experiment (else 409), with its checkpoints' files, trials, metrics and logs.
    ``state``: ``STATE_DELETED``, or ``STATE_DELETE_FAILED`` when some checkpoint files could not be
    deleted (they stay marked and are retried; deleting it again finishes)."""
    state = await svc.delete_experiment(runtime_of(request), user_of(request), exp_id)
    return DeleteExperimentResponse(state=state)


@post("/api/v1/experiments/continue", operation_id="ContinueExperiment", opt=opt(Action.EDIT),
      tags=["experiments"], status_code=200)
async def continue_experiment(request: AnyRequest,
                              data: svc.ContinueExperimentRequest) -> ContinueExperimentResponse:
    """Determined's ContinueExperiment: an ended single, grid or random experiment runs its
    unfinished trials again (a single one: its trial, with ``overrideConfig`` merged over its
    config), each from its latest checkpoint."""
    rt = runtime_of(request)
    await svc.continue_experiment(rt, user_of(request), data)
    async with rt.sessions() as session:
        _, out = await experiment_answer(session, data.id)
    return ContinueExperimentResponse(experiment=out, warnings=[])


@post("/api/v1/trials/{trial_id:int}/kill", operation_id="KillTrial", opt=opt(Action.EDIT), tags=["trials"],
      status_code=200)
async def kill_trial(request: AnyRequest, trial_id: TrialId) -> EmptyResponse:
    """The trial stops (CANCELED) and the search goes on without it; an ended trial is left as it is."""
    rt = runtime_of(request)
    await user_requests.kill_trial(rt.orchestrator, principal_of(request), trial_id)
    return EmptyResponse()


@post(f"{EXPERIMENT}/move", operation_id="MoveExperiment", opt=opt(Action.EDIT), tags=["experiments"],
      status_code=200)
async def move_experiment(request: AnyRequest, exp_id: ExperimentId, data: svc.MoveExperimentRequest) -> EmptyResponse:
    """`det e move`: into another project (``services/experiment_changes.move`` has the rules)."""
    await svc.move(runtime_of(request), principal_of(request), exp_id, data)
    return EmptyResponse()


ROUTES = [archive, unarchive, put_label, delete_label, delete_experiment, continue_experiment, kill_trial,
          move_experiment]
