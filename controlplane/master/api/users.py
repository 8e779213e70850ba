"""Login, logout, /me, users and passwords over Determined's ``/api/v1/users`` paths (reference §1).

Creating users and changing other people's accounts need an admin (``services/users.py`` holds
the rules); every body is a msgspec Struct decoded by Litestar at the edge.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, patch, post
from litestar.params import Parameter, QueryParameter

from controlplane.master.api.auth_guard import bearer_token, runtime_of, user_of
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import auth, tokens
from controlplane.master.services import users as svc
from controlplane.master.token_cache import token_hash

UserId = Annotated[int, Parameter(ge=1, le=2**31 - 1, description="the user's id")]


class LoginRequest(msgspec.Struct, rename="camel", kw_only=True):
    username: Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=svc.NO_NUL)]
    password: svc.Password = ""
    is_hashed: bool = False


class LoginResponse(msgspec.Struct, rename="camel", kw_only=True):
    token: str
    user: svc.V1User


@post("/api/v1/auth/login", operation_id="Login", opt=opt(Action.PUBLIC), tags=["auth"], status_code=200)
async def login(request: AnyRequest, data: LoginRequest) -> LoginResponse:
    async with runtime_of(request).sessions.begin() as session:
        token, user = await auth.login(session, data.username, data.password, data.is_hashed)
        return LoginResponse(token=token, user=svc.v1_user(user))


@post("/api/v1/auth/logout", operation_id="Logout", opt=opt(Action.PUBLIC), tags=["auth"], status_code=200)
async def logout(request: AnyRequest) -> EmptyResponse:
    token = bearer_token(request.headers.get("authorization"))
    if token:
        async with runtime_of(request).sessions.begin() as session:
            await auth.logout(session, token)
        runtime_of(request).tokens.users.drop(token_hash(token))
    return EmptyResponse()


@get("/api/v1/me", operation_id="GetMe", opt=opt(Action.SIGNED_IN), tags=["auth"])
async def get_me(request: AnyRequest) -> svc.UserResponse:
    me = user_of(request)
    async with runtime_of(request).sessions() as session:
        return svc.UserResponse(user=svc.v1_user(await svc.get_user(session, me.id)))


@get("/api/v1/users", operation_id="GetUsers", opt=opt(Action.VIEW), tags=["users"])
async def list_users(
    request: AnyRequest,
    offset: Annotated[int, Parameter(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Parameter(ge=0, le=svc.MAX_PAGE, description="0: the largest page")] = 100,
    name: Annotated[str | None, Parameter(max_length=255, pattern=svc.NO_NUL,
                                          description="part of a username or display name")] = None,
    active: bool | None = None,
    admin: bool | None = None,
) -> svc.UsersResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        return await svc.list_users(session, offset=offset, limit=limit, name=name, active=active, admin=admin)


@post("/api/v1/users", operation_id="PostUser", opt=opt(Action.ADMINISTER), tags=["users"], status_code=200)
async def create_user(request: AnyRequest, data: svc.PostUserRequest) -> svc.UserResponse:
    user_of(request)
    async with runtime_of(request).sessions.begin() as session:
        return svc.UserResponse(user=svc.v1_user(await svc.create_user(session, data)))


@get("/api/v1/users/{user_id:int}", operation_id="GetUser", opt=opt(Action.VIEW), tags=["users"])
async def get_user(request: AnyRequest, user_id: UserId) -> svc.UserResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        return svc.UserResponse(user=svc.v1_user(await svc.get_user(session, user_id)))


@get("/api/v1/users/{username:str}/by-username", operation_id="GetUserByUsername", opt=opt(Action.VIEW),
     tags=["users"])
async def get_user_by_username(request: AnyRequest,
                               username: Annotated[str, Parameter(max_length=255, pattern=svc.NO_NUL)]
                               ) -> svc.UserResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        return svc.UserResponse(user=svc.v1_user(await svc.get_by_username(session, username)))


@patch("/api/v1/users/{user_id:int}", operation_id="PatchUser", opt=opt(Action.SIGNED_IN), tags=["users"])
async def patch_user(request: AnyRequest, user_id: UserId, data: svc.PatchUser) -> svc.UserResponse:
    """An admin may change anything; anyone may change their own display name and password."""
    me = user_of(request)
    token = bearer_token(request.headers.get("authorization"))
    async with runtime_of(request).sessions.begin() as session:
        user = await svc.patch_user(session, runtime_of(request).tokens, me, token, user_id, data)
        return svc.UserResponse(user=svc.v1_user(user))


@post("/api/v1/users/{user_id:int}/password", operation_id="SetUserPassword", opt=opt(Action.SIGNED_IN),
      tags=["users"], status_code=200)
async def set_password(request: AnyRequest, user_id: UserId,
                       data: svc.Password | svc.PasswordChange) -> svc.UserResponse:
    """The Determined client sends the salted hash as a bare JSON string; an object may also carry
    ``oldPassword``, which changing one's own password needs."""
    me = user_of(request)
    change = svc.bare_password(data) if isinstance(data, str) else data
    token = bearer_token(request.headers.get("authorization"))
    async with runtime_of(request).sessions.begin() as session:
        user = await svc.get_user(session, user_id)
        await svc.set_password(session, runtime_of(request).tokens, me, token, user, change.password,
                               change.old_password, change.is_hashed)
        return svc.UserResponse(user=svc.v1_user(user))


@get("/api/v1/tokens", operation_id="GetAccessTokens", opt=opt(Action.SIGNED_IN), tags=["tokens"])
async def list_tokens(
    request: AnyRequest,
    offset: Annotated[int, Parameter(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Parameter(ge=0, le=tokens.MAX_PAGE, description="0: the largest page")] = 0,
    username: Annotated[str | None, Parameter(max_length=255, pattern=svc.NO_NUL)] = None,
    show_inactive: Annotated[bool, QueryParameter(name="showInactive", description="also expired ones")] = False,
    token_ids: Annotated[list[int] | None, QueryParameter(name="tokenIds", max_items=100)] = None,
    sort_by: Annotated[str | None, QueryParameter(name="sortBy", max_length=64, pattern=r"^[A-Z_]*$")] = None,
    order_by: Annotated[str | None, QueryParameter(name="orderBy", max_length=64, pattern=r"^[A-Z_]*$")] = None,
) -> tokens.TokensResponse:
    """One's own sessions (an admin: everyone's, or ``username``'s), without the token itself."""
    me = user_of(request)
    if any(not 0 <= t <= 2**31 - 1 for t in token_ids or []):
        raise BadRequest(f"tokenIds: each must be a token id (0..{2**31 - 1})")
    async with runtime_of(request).sessions() as session:
        return await tokens.list_tokens(session, me, username=username, show_inactive=show_inactive,
                                        token_ids=token_ids or [], sort_by=sort_by, order_by=order_by,
                                        offset=offset, limit=limit)


ROUTES = [login, logout, get_me, list_users, create_user, get_user, get_user_by_username, patch_user,
          set_password, list_tokens]
