"""Checkpoint reports and lookups (reference §3 `det checkpoint`, §4.4 row 9).

A task reports only into its own trial and reads only its own experiment's checkpoints; deleting
needs the owner of every named checkpoint's experiment (or an admin), checked before anything is
deleted. Configs in answers are redacted (``serializers``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import delete, get, post

from controlplane.common.floats import decode_nonfinite
from controlplane.config.stored import searcher_of
from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import (
    CheckpointUuid,
    ExperimentId,
    ListLimit,
    ListOffset,
    OrderBy,
    SortByAttr,
    TrialId,
    page_limit,
)
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.serializers import V1Checkpoint, checkpoint_json, pagination
from controlplane.master.authz import Action, opt
from controlplane.master.checkpoint_gc import collect as gc
from controlplane.master.checkpoint_gc import file_removal
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import checkpoints as svc
from controlplane.master.services.paging import Pagination

SORT_BY_SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


class CheckpointResponse(msgspec.Struct, rename="camel", kw_only=True):
    """GetCheckpoint and PostCheckpointMetadata's answer."""

    checkpoint: V1Checkpoint


class CheckpointsResponse(msgspec.Struct, rename="camel", kw_only=True):
    """GetExperimentCheckpoints and GetTrialCheckpoints' answer."""

    checkpoints: list[V1Checkpoint]
    pagination: Pagination


class DeleteCheckpointsResponse(msgspec.Struct, rename="camel", kw_only=True):
    deleted: list[str]  # uuids
    failed: dict[str, str]  # uuid -> error; these stay marked and are retried


@post("/api/v1/checkpoints", operation_id="ReportCheckpoint", opt=opt(Action.TASK_REPORT, "body"), tags=["checkpoints"],
      status_code=200, request_max_body_size=128 * 1024 * 1024)  # up to 1,000,000 files listed
async def report(request: AnyRequest, data: svc.ReportCheckpointRequest) -> EmptyResponse:
    await svc.report_checkpoint(runtime_of(request), principal_of(request), data)
    return EmptyResponse()


@get("/api/v1/checkpoints/{ckpt_uuid:str}", operation_id="GetCheckpoint", opt=opt(Action.VIEW, "body"),
     tags=["checkpoints"])
async def get_checkpoint(request: AnyRequest, ckpt_uuid: CheckpointUuid) -> CheckpointResponse:
    rt = runtime_of(request)
    ckpt, config, validation = await svc.get_checkpoint(rt, principal_of(request), ckpt_uuid)
    hparams = await svc.hparams_of(rt, {ckpt.trial_id})
    return CheckpointResponse(checkpoint=checkpoint_json(ckpt, config, validation, hparams.get(ckpt.trial_id or 0)))


@post("/api/v1/checkpoints/{checkpoint_uuid:str}/metadata", operation_id="PostCheckpointMetadata",
      opt=opt(Action.EDIT), tags=["checkpoints"], status_code=200)
async def post_metadata(request: AnyRequest, checkpoint_uuid: CheckpointUuid,
                        data: svc.PostCheckpointMetadataRequest) -> CheckpointResponse:
    """``checkpoint.add_metadata``: the checkpoint's metadata becomes the one sent (owner or admin)."""
    rt = runtime_of(request)
    ckpt, config, validation = await svc.set_metadata(rt, principal_of(request), checkpoint_uuid, data)
    hparams = await svc.hparams_of(rt, {ckpt.trial_id})
    return CheckpointResponse(checkpoint=checkpoint_json(ckpt, config, validation, hparams.get(ckpt.trial_id or 0)))


def _sorted(rows: list[Any], config: dict[str, Any], sort_by: str | None, order_by: str | None) -> list[Any]:
    if sort_by == SORT_BY_SEARCHER_METRIC:
        s = searcher_of(config)
        metric, smaller = s.metric, s.smaller_is_better

        def key(row: Any) -> tuple[int, float]:
            value = decode_nonfinite((row[1] or {}).get(metric))
            if not isinstance(value, (int, float)) or value != value:
                return (1, 0.0)
            return (0, value if smaller else -value)

        return sorted(rows, key=key)
    if order_by == "ORDER_BY_DESC":
        return list(reversed(rows))
    return rows


async def _page(request: AnyRequest, rows: list[Any], config: dict[str, Any], offset: int,
                limit: int) -> CheckpointsResponse:
    page = rows[offset:offset + page_limit(limit)]
    hparams = await svc.hparams_of(runtime_of(request), {c.trial_id for c, _ in page})
    return CheckpointsResponse(checkpoints=[checkpoint_json(c, config, v, hparams.get(c.trial_id or 0))
                                            for c, v in page],
                               pagination=pagination(offset, limit, len(rows), len(page)))


@get("/api/v1/experiments/{exp_id:int}/checkpoints", operation_id="GetExperimentCheckpoints", opt=opt(Action.VIEW),
     tags=["experiments"])
async def experiment_checkpoints(request: AnyRequest, exp_id: ExperimentId, limit: ListLimit = 0,
                                 offset: ListOffset = 0,
                                 sort_by_attr: SortByAttr = None, order_by: OrderBy = None) -> CheckpointsResponse:
    rows, config = await svc.list_checkpoints(runtime_of(request), experiment_id=exp_id)
    return await _page(request, _sorted(rows, config, sort_by_attr, order_by), config, offset, limit)


@get("/api/v1/trials/{trial_id:int}/checkpoints", operation_id="GetTrialCheckpoints",
     opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def trial_checkpoints(request: AnyRequest, trial_id: TrialId, limit: ListLimit = 0, offset: ListOffset = 0,
                            sort_by_attr: SortByAttr = None, order_by: OrderBy = None) -> CheckpointsResponse:
    rows, config = await svc.list_checkpoints(runtime_of(request), trial_id=trial_id)
    return await _page(request, _sorted(rows, config, sort_by_attr, order_by), config, offset, limit)


@delete("/api/v1/checkpoints", operation_id="DeleteCheckpoints", opt=opt(Action.EDIT), tags=["checkpoints"],
        status_code=200)
async def delete_checkpoints(request: AnyRequest, data: svc.DeleteCheckpointsRequest) -> DeleteCheckpointsResponse:
    """`det checkpoint rm`: mark, delete the files, record; what fails stays marked and is retried."""
    user = user_of(request)
    uuids = list(dict.fromkeys(data.checkpoint_uuids))
    rt = runtime_of(request)
    await gc.request_deletion(rt, uuids, user)
    report = await gc.drain(rt, only=set(uuids))
    if report.failed:
        rt.checkpoint_gc.deletions_pending()  # what failed stays marked: the GC loop retries it
    return DeleteCheckpointsResponse(deleted=report.deleted, failed=report.failed)


@post("/api/v1/checkpoints/rm", operation_id="CheckpointsRemoveFiles", opt=opt(Action.EDIT), tags=["checkpoints"],
      status_code=200)
async def remove_files(request: AnyRequest, data: file_removal.CheckpointsRemoveFilesRequest) -> EmptyResponse:
    """`det checkpoint rm UUID --glob PATTERN`: delete the checkpoints' files that match
    (``checkpoint_gc/file_removal.py``); no glob: their file lists are refreshed from storage."""
    await file_removal.remove_files(runtime_of(request), user_of(request), data)
    return EmptyResponse()


ROUTES = [report, get_checkpoint, post_metadata, experiment_checkpoints, trial_checkpoints, delete_checkpoints,
          remove_files]
