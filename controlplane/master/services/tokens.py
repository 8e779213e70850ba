"""``det token list``/``describe``: the sessions (bearer tokens) users hold, never their secret.

This master's tokens are login sessions (``user_sessions``: a sha256 of the token, its user,
creation and expiry), shown as Determined's ``v1TokenInfo`` of type ``TOKEN_TYPE_USER_SESSION``.
A user sees their own; an admin sees everyone's (or one user's, by ``username``). A logged-out
or deactivated session is deleted, so "inactive" means expired.
"""

from __future__ import annotations

import msgspec
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso, utcnow
from controlplane.master.db.models import User, UserSession
from controlplane.master.errors import Forbidden, NotFound
from controlplane.master.principals import AuthedUser
from controlplane.master.services.paging import Pagination

MAX_PAGE = 1000
SORTS = {"SORT_BY_UNSPECIFIED": UserSession.id, "SORT_BY_USER_ID": UserSession.user_id,
         "SORT_BY_EXPIRY": UserSession.expires_at, "SORT_BY_CREATED_AT": UserSession.created_at,
         "SORT_BY_TOKEN_TYPE": UserSession.id, "SORT_BY_REVOKED": UserSession.id,
         "SORT_BY_DESCRIPTION": UserSession.id}


class V1TokenInfo(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    user_id: int
    created_at: str
    expiry: str
    revoked: bool
    token_type: str
    description: str


class TokensResponse(msgspec.Struct, rename="camel", kw_only=True):
    token_info: list[V1TokenInfo]
    pagination: Pagination


async def list_tokens(session: AsyncSession, caller: AuthedUser, *, username: str | None, show_inactive: bool,
                      token_ids: list[int], sort_by: str | None, order_by: str | None, offset: int,
                      limit: int) -> TokensResponse:
    q = select(UserSession)
    if username:
        user_id = await session.scalar(select(User.id).where(User.username == username))
        if user_id is None:
            raise NotFound(f"username: user {username!r} not found")
        if user_id != caller.id and not caller.admin:
            raise Forbidden("username: only an admin may list another user's tokens")
        q = q.where(UserSession.user_id == user_id)
    elif not caller.admin:
        q = q.where(UserSession.user_id == caller.id)
    if not show_inactive:
        q = q.where(UserSession.expires_at > utcnow())
    if token_ids:
        q = q.where(UserSession.id.in_(token_ids))
    column = SORTS.get(sort_by or "SORT_BY_UNSPECIFIED", UserSession.id)
    desc = order_by == "ORDER_BY_DESC"
    size = MAX_PAGE if limit <= 0 else min(limit, MAX_PAGE)
    total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = (await session.scalars(q.order_by(column.desc() if desc else column, UserSession.id)
                                  .offset(offset).limit(size))).all()
    return TokensResponse(
        token_info=[V1TokenInfo(id=t.id, user_id=t.user_id, created_at=iso(t.created_at) or "",
                                expiry=iso(t.expires_at) or "", revoked=False, token_type="TOKEN_TYPE_USER_SESSION",
                                description="login session") for t in rows],
        pagination=Pagination(offset=offset, limit=limit, start_index=offset, end_index=offset + len(rows),
                              total=total))
