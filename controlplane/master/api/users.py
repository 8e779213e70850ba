"""Login, logout, /me and passwords (reference §1)."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from litestar import Request, get, post
from sqlalchemy import select

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import bearer_token, current_user, runtime_of
from controlplane.master.api.requests import field, path_int, read_json
from controlplane.master.db.models import User
from controlplane.master.errors import BadRequest, Forbidden, NotFound
from controlplane.master.services import auth
from controlplane.master.principals import AuthedUser
from controlplane.master.services.token_cache import USER_TOKENS


def user_json(user: User) -> dict:
    return {
        "id": user.id,
        "username": user.username,
        "admin": user.admin,
        "active": user.active,
        "displayName": user.display_name or "",
        "modifiedAt": iso(user.created_at),
    }


@post("/api/v1/auth/login", operation_id="Login", opt=opt(Action.PUBLIC), tags=["auth"], status_code=200)
async def login(request: Request) -> dict:
    body = await read_json(request)
    username = field(body, "username")
    password = field(body, "password", "")
    if not isinstance(username, str) or not username:
        raise BadRequest("username: required")
    if not isinstance(password, str):
        raise BadRequest("password: must be a string")
    rt = runtime_of(request)
    async with rt.sessions.begin() as session:
        token, user = await auth.login(session, username, password, bool(field(body, "isHashed", False)))
        return {"token": token, "user": user_json(user)}


@post("/api/v1/auth/logout", operation_id="Logout", opt=opt(Action.PUBLIC), tags=["auth"], status_code=200)
async def logout(request: Request) -> dict:
    token = bearer_token(request.headers.get("authorization"))
    if token:
        async with runtime_of(request).sessions.begin() as session:
            await auth.logout(session, token)
        USER_TOKENS.drop(auth.token_hash(token))
    return {}


@get("/api/v1/me", operation_id="GetMe", opt=opt(Action.SIGNED_IN), tags=["auth"])
async def get_me(request: Request) -> dict:
    me = await current_user(request)
    async with runtime_of(request).sessions() as session:
        user = await session.get(User, me.id)
        return {"user": user_json(user)}


@get("/api/v1/users", operation_id="GetUsers", opt=opt(Action.VIEW), tags=["auth"])
async def list_users(request: Request, name: str | None = None) -> dict:
    await current_user(request)
    async with runtime_of(request).sessions() as session:
        q = select(User).order_by(User.id)
        if name:
            q = q.where(User.username == name)
        users = (await session.scalars(q)).all()
    return {"users": [user_json(u) for u in users],
            "pagination": {"offset": 0, "limit": len(users), "startIndex": 0,
                           "endIndex": len(users), "total": len(users)}}


@post("/api/v1/users/{user_id:str}/password", operation_id="SetUserPassword", opt=opt(Action.SIGNED_IN), tags=["auth"], status_code=200)
async def set_password(request: Request, user_id: str) -> dict:
    me: AuthedUser = await current_user(request)
    target = path_int(user_id, "userId")
    if target != me.id and not me.admin:
        raise Forbidden("only an admin can change another user's password")
    body = await read_json(request, default="")
    # The Determined client sends the salted hash as a bare JSON string; accept an object too.
    if isinstance(body, dict):
        value = field(body, "password", None)
        is_hashed = bool(field(body, "isHashed", True))
    else:
        value, is_hashed = body, True
    if not isinstance(value, str):
        raise BadRequest("password: must be a string")
    async with runtime_of(request).sessions.begin() as session:
        if await session.get(User, target) is None:
            raise NotFound(f"user {target} not found")
        await auth.set_password(session, target, auth.client_password_value(value, is_hashed))
    return {}
