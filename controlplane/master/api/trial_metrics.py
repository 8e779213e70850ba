"""Determined's metric streams: ``GET /api/v1/trials/metrics/{trial_metrics,training_metrics,
validation_metrics}?trialIds=...``, what the SDK's ``trial.iter_metrics(group)`` and the
deprecated ``stream_training_metrics()`` / ``stream_validation_metrics()`` read.

NDJSON with chunked encoding, one ``{"result": {"metrics": [v1MetricsReport, ...]}}`` line per page
(``services/metric_reads.py``); the stream ends after the last report, as Determined's does. Bad
ids or a missing group are a 400 before the 200 is sent; a failure after it ends the stream with
one ``{"error": ...}`` line. A stream may carry a trial's whole history, so it takes one of the
master's stream slots while it runs (``stream_slots.py``: per user and in all, 429 beyond).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from litestar import get
from litestar.background_tasks import BackgroundTask
from litestar.params import QueryParameter
from litestar.response import Stream

from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads as reads
from controlplane.master.services.metric_reads import TRAINING, VALIDATION, report_pages
from controlplane.master.stream_slots import take_slot

log = logging.getLogger(__name__)

MAX_TRIALS = 1000
_encoder = msgspec.json.Encoder()
TrialIds = Annotated[list[int] | None, QueryParameter(name="trialIds", max_items=MAX_TRIALS,
                                                      description="the trials whose reports to stream")]
Group = Annotated[str | None, QueryParameter(max_length=64, pattern=r"^[^.\x00]*$",
                                             description="training, validation or another group's name")]


async def _checked(rt: MasterRuntime, trial_ids: list[int] | None) -> list[int]:
    """Determined's checks: at least one id, none twice, each an existing trial (else 404)."""
    ids = trial_ids or []
    if not ids:
        raise BadRequest("trialIds: must name at least one trial")
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise BadRequest(f"trialIds: trial {twice} is named twice")
    if any(not 1 <= i <= 2**31 - 1 for i in ids):
        raise BadRequest("trialIds: each must be a trial id from 1 to 2147483647")
    known = await reads.existing_trials(rt.sessions, ids)
    missing = [i for i in ids if i not in known]
    if missing:
        raise NotFound(f"trial {missing[0]} not found")
    return ids


def _stream(request: AnyRequest, ids: list[int], group: str) -> Stream:
    rt = runtime_of(request)
    slot = take_slot(rt.streams, rt.settings, principal_of(request))

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for line in report_pages(rt, ids, group):
                yield line
        except Exception:  # the 200 is sent: end the stream with a line saying why
            log.exception("metric stream of trials %s failed", ids)
            message = "reading the metrics failed; the master log has the details"
            yield _encoder.encode({"error": {"error": message, "message": message, "httpCode": 500}}) + b"\n"

    return Stream(slot.hold_while(lines()), media_type="application/x-ndjson", background=BackgroundTask(slot.release))


@get("/api/v1/trials/metrics/trial_metrics", operation_id="GetMetrics", opt=opt(Action.VIEW), tags=["trials"],
     media_type="application/x-ndjson")
async def trial_metrics(request: AnyRequest, trial_ids: TrialIds = None, group: Group = None) -> Stream:
    """Every report of ``group`` of each trial."""
    if not group:
        raise BadRequest("group: required (training, validation or another group's name)")
    rt = runtime_of(request)
    return _stream(request, await _checked(rt, trial_ids), group)


@get("/api/v1/trials/metrics/training_metrics", operation_id="GetTrainingMetrics", opt=opt(Action.VIEW),
     tags=["trials"], media_type="application/x-ndjson")
async def training_metrics(request: AnyRequest, trial_ids: TrialIds = None) -> Stream:
    rt = runtime_of(request)
    return _stream(request, await _checked(rt, trial_ids), TRAINING)


@get("/api/v1/trials/metrics/validation_metrics", operation_id="GetValidationMetrics", opt=opt(Action.VIEW),
     tags=["trials"], media_type="application/x-ndjson")
async def validation_metrics(request: AnyRequest, trial_ids: TrialIds = None) -> Stream:
    rt = runtime_of(request)
    return _stream(request, await _checked(rt, trial_ids), VALIDATION)


ROUTES = [trial_metrics, training_metrics, validation_metrics]
