"""OpenPAI's job routes (its REST server's v1 paths and shapes), so its clients and job files work here.

- ``POST /api/v1/user/{username}/jobs``: the job JSON itself, as OpenPAI takes it (a job with a
  ``codeDir`` needs its directory uploaded: ``POST /api/v1/pai/jobs``, which ``det pai submit`` uses);
- ``GET /api/v1/jobs`` and ``GET /api/v1/user/{username}/jobs``: job summaries, newest first, paged;
- ``GET /api/v1/user/{username}/jobs/{jobName}``: the job and each task's state, address and ports;
- ``GET .../{jobName}/config``: the submitted JSON (owner or admin: its ``jobEnvs`` may hold secrets);
- ``PUT .../{jobName}/executionType`` ``{"value": "STOP"}``: stop it (owner or admin);
- ``GET .../{jobName}/logs``: its tasks' lines, paged by line id (our addition: OpenPAI links to files);
- ``GET .../{jobName}/ssh``: the running tasks' SSH endpoints, the job's key and the host key to pin
  (owner or admin).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import get, post, put
from litestar.params import Parameter, QueryParameter

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import ListLimit, ListOffset, page_limit
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import pai_jobs as svc
from controlplane.pai.spec import MAX_NAME, MAX_ROLE_NAME

JOB = "/api/v1/user/{username:str}/jobs/{job_name:str}"
Username = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00/]+$",
                                    description="the job owner's user name")]
JobName = Annotated[str, Parameter(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9\-._~]+$",
                                   description="the job's jobName")]
RoleQuery = Annotated[str | None, QueryParameter(name="taskRole", max_length=MAX_ROLE_NAME,
                                            pattern=r"^[A-Za-z0-9._~]+$")]
IndexQuery = Annotated[int | None, QueryParameter(name="taskIndex", ge=0, le=1023)]
AfterQuery = Annotated[int, Parameter(ge=0, le=2**63 - 1, description="the last line id already read")]
LogLimit = Annotated[int, Parameter(ge=1, le=svc.MAX_LOG_PAGE)]
MAX_BODY = 2 * 1024 * 1024  # the job JSON is capped at 1 MiB by the protocol's own check
MAX_UPLOAD = 300 * 1024 * 1024  # codeDir: OpenPAI's 200 MB, base64-encoded


class ExecutionType(msgspec.Struct, kw_only=True):
    value: Annotated[str, msgspec.Meta(max_length=16)]


@post("/api/v1/user/{username:str}/jobs", operation_id="PaiSubmitJob", opt=opt(Action.CREATE), tags=["pai"],
      status_code=202, request_max_body_size=MAX_BODY)
async def submit_job(request: AnyRequest, username: Username, data: dict[str, Any]) -> svc.Submitted:
    return await svc.submit(runtime_of(request), user_of(request), username, data)


@post("/api/v1/pai/jobs", operation_id="PaiSubmitJobWithCode", opt=opt(Action.CREATE), tags=["pai"],
      status_code=202, request_max_body_size=MAX_UPLOAD)
async def submit_job_with_code(request: AnyRequest, data: svc.SubmitPaiJobRequest) -> svc.Submitted:
    user = user_of(request)
    return await svc.submit(runtime_of(request), user, user.username, data.job, data.code_files)


@get("/api/v1/jobs", operation_id="PaiListJobs", opt=opt(Action.VIEW), tags=["pai"])
async def list_all_jobs(request: AnyRequest, username: Annotated[str | None, Parameter(
        max_length=255, pattern=r"^[^\x00/]*$")] = None, limit: ListLimit = 0,
        offset: ListOffset = 0) -> list[svc.JobSummary]:
    return await svc.list_jobs(runtime_of(request), username or None, offset, page_limit(limit))


@get("/api/v1/user/{username:str}/jobs", operation_id="PaiListUserJobs", opt=opt(Action.VIEW), tags=["pai"])
async def list_user_jobs(request: AnyRequest, username: Username, limit: ListLimit = 0,
                         offset: ListOffset = 0) -> list[svc.JobSummary]:
    return await svc.list_jobs(runtime_of(request), username, offset, page_limit(limit))


@get(JOB, operation_id="PaiGetJob", opt=opt(Action.VIEW), tags=["pai"])
async def get_job(request: AnyRequest, username: Username, job_name: JobName) -> svc.JobDetail:
    return await svc.describe(runtime_of(request), username, job_name)


@get(f"{JOB}/config", operation_id="PaiGetJobConfig", opt=opt(Action.READ_OWN), tags=["pai"])
async def get_job_config(request: AnyRequest, username: Username, job_name: JobName) -> dict[str, Any]:
    return await svc.config(runtime_of(request), principal_of(request), username, job_name)


@put(f"{JOB}/executionType", operation_id="PaiSetExecutionType", opt=opt(Action.EDIT), tags=["pai"],
     status_code=202)
async def set_execution_type(request: AnyRequest, username: Username, job_name: JobName,
                             data: ExecutionType) -> svc.Submitted:
    return await svc.stop(runtime_of(request), principal_of(request), username, job_name, data.value)


@get(f"{JOB}/logs", operation_id="PaiGetJobLogs", opt=opt(Action.VIEW), tags=["pai"])
async def get_job_logs(request: AnyRequest, username: Username, job_name: JobName, task_role: RoleQuery = None,
                       task_index: IndexQuery = None, after: AfterQuery = 0, limit: LogLimit = 1000) -> svc.JobLogs:
    return await svc.logs(runtime_of(request), username, job_name, task_role, task_index, after, limit)


@get(f"{JOB}/ssh", operation_id="PaiGetJobSsh", opt=opt(Action.READ_OWN), tags=["pai"])
async def get_job_ssh(request: AnyRequest, username: Username, job_name: JobName) -> svc.SshInfo:
    return await svc.ssh_info(runtime_of(request), principal_of(request), username, job_name)


ROUTES = [get_job_ssh, submit_job, submit_job_with_code, list_all_jobs, list_user_jobs, get_job, get_job_config,
          set_execution_type, get_job_logs]
