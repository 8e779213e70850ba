"""Determined's commands, shells, notebooks and TensorBoards over its 0.38.1 paths:
``/api/v1/{commands,shells,notebooks,tensorboards}``.

``POST`` launches one (``v1Launch*Request``: ``config``, ``files``, a template; answered with the
task and its ``config``), ``GET`` lists them (paged; ``users``/``userIds`` keep only theirs, what
``det cmd list`` sends without ``--all``) or gets one by id (with its ``config``), ``POST
.../{id}/kill`` stops it (owner or admin), ``GET .../{id}/logs`` pages its lines by line id
(``after``, ``nextAfter``; this platform's own CLI reads it; Determined's reads
``/api/v1/tasks/{id}/logs``). Each runs as a one-task job (``services/commands.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import get, post
from litestar.params import Parameter, QueryParameter
from msgspec import UNSET, UnsetType

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.pai import AfterQuery, LogLimit
from controlplane.master.api.params import ListLimit, ListOffset, page_limit
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import commands as svc
from controlplane.master.services.paging import Pagination

CommandId = Annotated[str, Parameter(min_length=1, max_length=64, pattern=r"^[0-9a-fA-F-]+$",
                                     description="the command's, shell's or notebook's id")]
MAX_BODY = 300 * 1024 * 1024  # a context of up to 95 MiB, base64-encoded
Answer = dict[str, Any]  # Determined's v1Command, v1Shell, v1Notebook or v1Tensorboard (``services/commands.py``)


class CommandResponse(msgspec.Struct, rename="camel", kw_only=True):
    """Get/Kill{Command,Shell,Notebook,Tensorboard}'s answer: the one key its kind names (and, for
    get, its ``config``)."""

    command: Answer | UnsetType = UNSET
    shell: Answer | UnsetType = UNSET
    notebook: Answer | UnsetType = UNSET
    tensorboard: Answer | UnsetType = UNSET
    config: dict[str, Any] | UnsetType = UNSET


class LaunchResponse(CommandResponse, kw_only=True):
    """Launch{Command,Shell,Notebook,Tensorboard}'s answer."""

    warnings: list[str]  # Determined's v1LaunchWarning values


class CommandsResponse(msgspec.Struct, rename="camel", kw_only=True):
    """Get{Commands,Shells,Notebooks,Tensorboards}' answer: the one list its kind names."""

    commands: list[Answer] | UnsetType = UNSET
    shells: list[Answer] | UnsetType = UNSET
    notebooks: list[Answer] | UnsetType = UNSET
    tensorboards: list[Answer] | UnsetType = UNSET
    pagination: Pagination


def _one(kind: str, answer: Answer) -> CommandResponse:
    return CommandResponse(**{kind: answer})


UserNames = Annotated[list[str] | None, QueryParameter(name="users", max_items=100,
                                                        description="only these users' (usernames)")]
UserIds = Annotated[list[int] | None, QueryParameter(name="userIds", max_items=100,
                                                      description="only these users' (user ids)")]


def _routes(kind: str) -> list[Any]:
    plural, title = f"{kind}s", kind.capitalize()

    @post(f"/api/v1/{plural}", operation_id=f"Launch{title}", opt=opt(Action.CREATE), tags=[plural],
          status_code=200, request_max_body_size=MAX_BODY, name=f"launch-{kind}")
    async def launch(request: AnyRequest, data: svc.LaunchRequest) -> LaunchResponse:
        answer, config = await svc.launch(runtime_of(request), user_of(request), kind, data)
        return LaunchResponse(**{kind: answer}, config=config, warnings=[])

    @get(f"/api/v1/{plural}", operation_id=f"Get{title}s", opt=opt(Action.VIEW), tags=[plural],
         name=f"list-{kind}s")
    async def list_them(request: AnyRequest, limit: ListLimit = 0, offset: ListOffset = 0, users: UserNames = None,
                        user_ids: UserIds = None) -> CommandsResponse:
        if any(len(u) > 255 or "\x00" in u for u in users or []):
            raise BadRequest("users: each a username of at most 255 characters")
        if any(not 1 <= i <= 2**31 - 1 for i in user_ids or []):
            raise BadRequest("userIds: each a user id from 1 to 2147483647")
        page = await svc.list_kind(runtime_of(request), principal_of(request), kind, offset, page_limit(limit),
                                   users or [], user_ids or [])
        return CommandsResponse(**{f"{kind}s": page[f"{kind}s"]},
                                pagination=msgspec.convert(page["pagination"], Pagination))

    @get(f"/api/v1/{plural}/{{command_id:str}}", operation_id=f"Get{title}", opt=opt(Action.VIEW), tags=[plural],
         name=f"get-{kind}")
    async def get_one(request: AnyRequest, command_id: CommandId) -> CommandResponse:
        answer, config = await svc.get_with_config(runtime_of(request), principal_of(request), kind, command_id)
        return CommandResponse(**{kind: answer}, config=config)

    @post(f"/api/v1/{plural}/{{command_id:str}}/kill", operation_id=f"Kill{title}", opt=opt(Action.EDIT),
          tags=[plural], status_code=200, name=f"kill-{kind}")
    async def kill(request: AnyRequest, command_id: CommandId) -> CommandResponse:
        return _one(kind, await svc.kill(runtime_of(request), principal_of(request), kind, command_id))

    @get(f"/api/v1/{plural}/{{command_id:str}}/logs", operation_id=f"Get{title}Logs", opt=opt(Action.VIEW),
         tags=[plural], name=f"logs-{kind}")
    async def logs(request: AnyRequest, command_id: CommandId, after: AfterQuery = 0,
                   limit: LogLimit = 1000) -> svc.pai_svc.JobLogs:
        return await svc.logs(runtime_of(request), kind, command_id, after, limit)

    return [launch, list_them, get_one, kill, logs]


ROUTES = [route for kind in svc.KINDS for route in _routes(kind)]
