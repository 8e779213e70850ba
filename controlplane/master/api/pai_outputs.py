"""OpenPAI jobs' outputs (what each task left in ``$PAI_OUTPUT_DIR``, kept in checkpoint storage).

- ``POST /api/v1/allocations/{alloc_id}/outputs``: a task's agent sends the directory as a tar stream
  when the task ends (its allocation token; ``leftOut``: what the agent left out, in words);
- ``GET /api/v1/user/{username}/jobs/{jobName}/outputs``: a page of the kept files (``attempt``,
  ``task`` as ``<role>-<index>``, ``limit``, ``offset``) and where they are kept;
- ``GET .../outputs/file?task=&path=[&attempt=]``: one file (default: the newest attempt that kept that task's);
- ``GET .../outputs/archive[?task=][&attempt=]``: a tar.gz of an attempt's outputs (default: the newest
  attempt that kept any), each task's files under ``<role>-<index>/``.

The reads are the job owner's or an admin's (``READ_OWN``), as its config is.
"""

from __future__ import annotations

import shutil
from typing import Annotated

from litestar import get, post
from litestar.background_tasks import BackgroundTask
from litestar.params import Parameter, QueryParameter
from litestar.response import File

from controlplane.master.api.allocations import AllocId
from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.pai import JOB, JobName, Username
from controlplane.master.api.params import ListLimit, ListOffset, page_limit
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import pai_outputs as svc
from controlplane.pai import outputs as out
from controlplane.pai.spec import MAX_RETRIES

TaskQuery = Annotated[str | None, Parameter(max_length=80, pattern=r"^[A-Za-z0-9._~]+-[0-9]{1,6}$",
                                            description="a task as <role>-<index>, e.g. worker-0")]
AttemptQuery = Annotated[int | None, Parameter(ge=1, le=MAX_RETRIES + 1,
                                               description="the attempt (1, then +1 per retry)")]
# Required, but checked after who may ask: a stranger learns nothing from a 400.
PathQuery = Annotated[str | None, Parameter(min_length=1, max_length=out.MAX_NAME, pattern=r"^[^\x00]+$",
                                            description="a file's path under the task's $PAI_OUTPUT_DIR (required)")]
LeftOut = Annotated[str | None, QueryParameter(name="leftOut", max_length=1000, pattern=r"^[^\x00]*$",
                                               description="what the agent left out of the directory, in words")]


@post("/api/v1/allocations/{alloc_id:str}/outputs", operation_id="PaiKeepTaskOutputs",
      opt=opt(Action.TASK_REPORT, ("allocation", "alloc_id")), tags=["pai"], status_code=200,
      request_max_body_size=out.MAX_TAR_BYTES)
async def keep_outputs(request: AnyRequest, alloc_id: AllocId, left_out: LeftOut = None) -> svc.OutputsKept:
    """The task's $PAI_OUTPUT_DIR as a tar stream (regular files only), kept under its job."""
    return await svc.receive(runtime_of(request), principal_of(request), alloc_id, request.stream(), left_out or "")


@get(f"{JOB}/outputs", operation_id="PaiListJobOutputs", opt=opt(Action.READ_OWN), tags=["pai"])
async def list_outputs(request: AnyRequest, username: Username, job_name: JobName, attempt: AttemptQuery = None,
                       task: TaskQuery = None, limit: ListLimit = 0, offset: ListOffset = 0) -> svc.JobOutputs:
    return await svc.list_outputs(runtime_of(request), principal_of(request), username, job_name, attempt=attempt,
                                  task=task, offset=offset, limit=page_limit(limit))


@get(f"{JOB}/outputs/file", operation_id="PaiDownloadJobOutputFile", opt=opt(Action.READ_OWN), tags=["pai"])
async def output_file(request: AnyRequest, username: Username, job_name: JobName, task: TaskQuery = None,
                      path: PathQuery = None, attempt: AttemptQuery = None) -> File:
    """One kept file (``task`` and ``path`` required)."""
    found, work = await svc.fetch_file(runtime_of(request), principal_of(request), username, job_name, task, path,
                                       attempt)
    return File(found, filename=found.name, media_type="application/octet-stream",
                background=BackgroundTask(shutil.rmtree, work, True))


@get(f"{JOB}/outputs/archive", operation_id="PaiDownloadJobOutputs", opt=opt(Action.READ_OWN), tags=["pai"])
async def output_archive(request: AnyRequest, username: Username, job_name: JobName, task: TaskQuery = None,
                         attempt: AttemptQuery = None) -> File:
    archive, work, which = await svc.fetch_archive(runtime_of(request), principal_of(request), username, job_name,
                                                   task, attempt)
    name = f"{job_name}-attempt-{which}{'-' + task if task else ''}-outputs.tar.gz"
    return File(archive, filename=name, media_type="application/gzip",
                background=BackgroundTask(shutil.rmtree, work, True))


ROUTES = [keep_outputs, list_outputs, output_file, output_archive]
