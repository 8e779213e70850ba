"""Users: create, list, change, activate, roles and passwords (Determined's ``/api/v1/users``).

The request and answer shapes are msgspec Structs in Determined's wire format (camelCase). Who may
do what: creating users and changing someone else's account need an admin; anyone signed in may
change their own display name and password, and changing one's own password needs the old one or
a login of the last few minutes (Determined's client cannot send the old one).
Ending a user's sessions (deactivation, a new password) removes them from the database and the
token cache at once. The cluster always keeps one active admin.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import msgspec
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso, utcnow
from controlplane.master.db.models import User
from controlplane.master.errors import BadRequest, Conflict, Forbidden, NotFound
from controlplane.master.principals import AuthedUser, Role
from controlplane.master.services import auth
from controlplane.master.services.paging import Pagination
from controlplane.master.token_cache import TokenCaches

NO_NUL = r"^[^\x00]*$"
MAX_PAGE = 1000
# No control characters, spaces or slashes: a username is also a path segment (/by-username).
Username = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[^\x00-\x20/\x7f]+$")]
DisplayName = Annotated[str, msgspec.Meta(max_length=255, pattern=NO_NUL)]
Password = Annotated[str, msgspec.Meta(max_length=1024, pattern=NO_NUL)]


class NewUser(msgspec.Struct, rename="camel", kw_only=True):
    username: Username
    admin: bool = False
    active: bool = True
    display_name: DisplayName | None = None
    role: Role | None = None  # ours; Determined's clients send only ``admin``


class PostUserRequest(msgspec.Struct, rename="camel", kw_only=True):
    user: NewUser
    password: Password = ""
    is_hashed: bool = False


class PatchUser(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PatchUser`` plus ``role`` and ``oldPassword`` (one's own password needs it, or
    a recent login; a fresh account with the empty password can always set its first)."""

    username: Username | None = None
    display_name: DisplayName | None = None
    admin: bool | None = None
    active: bool | None = None
    role: Role | None = None
    password: Password | None = None
    old_password: Password | None = None
    is_hashed: bool = False


class PasswordChange(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /users/{id}/password`` as an object (the Determined client sends a bare string)."""

    password: Password
    old_password: Password | None = None
    is_hashed: bool = True


def bare_password(value: str) -> PasswordChange:
    """The Determined client's bare-string body, checked as the object's ``password`` would be."""
    try:
        return msgspec.convert({"password": value}, PasswordChange)
    except msgspec.ValidationError as e:
        raise BadRequest(str(e).replace("at `$.password`", "").rstrip(" -").join(("password: ", ""))) from e


class V1User(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    username: str
    admin: bool
    active: bool
    role: str
    display_name: str
    modified_at: str
    remote: bool = False


class UserResponse(msgspec.Struct, rename="camel", kw_only=True):
    user: V1User


class UsersResponse(msgspec.Struct, rename="camel", kw_only=True):
    users: list[V1User]
    pagination: Pagination


def v1_user(user: User) -> V1User:
    return V1User(id=user.id, username=user.username, admin=user.admin, active=user.active, role=user.role,
                  display_name=user.display_name or "", modified_at=iso(user.created_at) or "")


async def get_user(session: AsyncSession, user_id: int) -> User:
    user = await session.get(User, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


async def get_by_username(session: AsyncSession, username: str) -> User:
    user = await session.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f"user '{username}' not found")
    return user


async def list_users(session: AsyncSession, *, offset: int, limit: int, name: str | None = None,
                     active: bool | None = None, admin: bool | None = None) -> UsersResponse:
    """A page of users by id; ``name`` matches part of a username or display name (any case)."""
    limit = MAX_PAGE if limit <= 0 else min(limit, MAX_PAGE)
    q = select(User)
    if name:
        needle = name.lower()
        q = q.where(or_(func.lower(User.username).contains(needle, autoescape=True),
                        func.lower(func.coalesce(User.display_name, "")).contains(needle, autoescape=True)))
    if active is not None:
        q = q.where(User.active == active)
    if admin is not None:
        q = q.where(User.admin == admin)
    total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = (await session.scalars(q.order_by(User.id).offset(offset).limit(limit))).all()
    return UsersResponse(users=[v1_user(u) for u in rows],
                         pagination=Pagination(offset=offset, limit=limit, start_index=offset,
                                               end_index=offset + len(rows), total=total))


def _role_of(admin: bool | None, role: Role | None, current: Role) -> Role:
    if role is not None:
        if admin is not None and admin != (role is Role.ADMIN):
            raise BadRequest(f"admin: {str(admin).lower()} contradicts role: {role.value}")
        return role
    if admin is True:
        return Role.ADMIN
    if admin is False and current is Role.ADMIN:
        return Role.USER
    return current


async def create_user(session: AsyncSession, req: PostUserRequest) -> User:
    new = req.user
    if await session.scalar(select(User.id).where(User.username == new.username)) is not None:
        raise Conflict(f"user '{new.username}' already exists")
    if new.role is None:
        role = Role.ADMIN if new.admin else Role.USER
    elif new.admin and new.role is not Role.ADMIN:
        raise BadRequest(f"admin: true contradicts role: {new.role.value}")
    else:
        role = new.role
    digest = await asyncio.to_thread(auth.hash_password, auth.client_password_value(req.password, req.is_hashed))
    user = User(username=new.username, password_hash=digest, admin=role is Role.ADMIN, role=role.value,
                active=new.active, display_name=new.display_name or None, created_at=utcnow())
    session.add(user)
    await session.flush()
    return user


async def _keep_an_admin(session: AsyncSession, user: User) -> None:
    """Refuse to demote or deactivate the last active admin: nobody could manage the cluster."""
    others = await session.scalar(select(func.count()).select_from(User).where(
        User.role == Role.ADMIN.value, User.active.is_(True), User.id != user.id))
    if not others:
        raise Conflict(f"user '{user.username}' is the last active admin; make another admin first")


async def patch_user(session: AsyncSession, tokens: TokenCaches, caller: AuthedUser, caller_token: str | None,
                     user_id: int, patch: PatchUser) -> User:
    if not caller.admin:
        if caller.id != user_id:
            raise Forbidden("only an admin may change another user")
        for name, value in (("username", patch.username), ("admin", patch.admin), ("active", patch.active),
                            ("role", patch.role)):
            if value is not None:
                raise Forbidden(f"{name}: only an admin may change it")
    user = await get_user(session, user_id)
    if patch.username is not None and patch.username != user.username:
        if await session.scalar(select(User.id).where(User.username == patch.username)) is not None:
            raise Conflict(f"user '{patch.username}' already exists")
        user.username = patch.username
    if patch.display_name is not None:
        user.display_name = patch.display_name or None
    role = _role_of(patch.admin, patch.role, Role(user.role))
    losing_admin = user.role == Role.ADMIN.value and user.active and (
        role is not Role.ADMIN or patch.active is False)
    if losing_admin:
        await _keep_an_admin(session, user)
    if role.value != user.role:
        user.role, user.admin = role.value, role is Role.ADMIN
        tokens.forget_user(user.id)
    if patch.active is not None and patch.active != user.active:
        user.active = patch.active
        if not patch.active:
            await auth.end_sessions(session, tokens, user.id)
        tokens.forget_user(user.id)
    if patch.password is not None:
        await set_password(session, tokens, caller, caller_token, user, patch.password, patch.old_password,
                           patch.is_hashed)
    await session.flush()
    return user


async def _proves_identity(session: AsyncSession, caller_token: str | None, user: User, old_password: str | None,
                           is_hashed: bool) -> bool:
    """The old password when sent; without it, a login session begun within ``RECENT_SIGN_IN`` (what
    Determined's client can do: ``det user change-password`` and the SDK send no old password) or
    an account that has the empty password still."""
    old = auth.client_password_value(old_password or "", is_hashed)
    if await asyncio.to_thread(auth.verify_password, old, user.password_hash):
        return True
    if old_password is not None or caller_token is None:
        return False
    since = await auth.signed_in_at(session, caller_token)
    return since is not None and utcnow() - since <= auth.RECENT_SIGN_IN


async def set_password(session: AsyncSession, tokens: TokenCaches, caller: AuthedUser, caller_token: str | None,
                       user: User, password: str, old_password: str | None, is_hashed: bool) -> None:
    """One's own password needs the old one and ends one's other sessions; an admin setting
    someone else's needs no old password and ends all of that user's sessions."""
    own = caller.id == user.id
    if not own and not caller.admin:
        raise Forbidden("only an admin may change another user's password")
    if own and not await _proves_identity(session, caller_token, user, old_password, is_hashed):
        minutes = int(auth.RECENT_SIGN_IN.total_seconds() // 60)
        raise Forbidden("oldPassword: does not match the current password" if old_password is not None else
                        f"oldPassword: required to change your own password unless you signed in within the "
                        f"last {minutes} minutes (det user login, then try again)")
    user.password_hash = await asyncio.to_thread(auth.hash_password,
                                                 auth.client_password_value(password, is_hashed))
    await auth.end_sessions(session, tokens, user.id, keep_token=caller_token if own else None)
