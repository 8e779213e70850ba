"""Users, passwords and session tokens.

The Determined client hashes passwords before sending them (sha512 of a fixed salt and the
password; "" for the empty password), so the master stores a slow hash of that client value.
Tokens are random and stored only as sha256 hashes.

A login costs one scrypt whether or not the user exists (an unknown or inactive user is checked
against a dummy hash), so its answer time does not tell who has an account.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, utcnow
from controlplane.master.db.models import Allocation, Trial, User, UserSession
from controlplane.master.errors import Unauthenticated
from controlplane.master.principals import AuthedUser, Role
from controlplane.master.token_cache import TokenCaches, token_hash

CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
SESSION_LIFETIME = timedelta(days=7)
# Determined 0.38.1's client cannot send the old password (v1PatchUser has no field for it), so a
# login this recent stands in for it: whoever holds an older (perhaps leaked) token must sign in again.
RECENT_SIGN_IN = timedelta(minutes=10)
DEFAULT_USERS = (("admin", True), ("determined", False))


def client_password_value(password: str, is_hashed: bool) -> str:
    """The value the Determined client would send for this password."""
    if is_hashed or password == "":
        return password
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def _scrypt(value: str, salt: bytes) -> bytes:
    return hashlib.scrypt(value.encode(), salt=salt, n=2**14, r=8, p=1)


def hash_password(client_value: str) -> str:
    salt = secrets.token_bytes(16)
    return f"{salt.hex()}${_scrypt(client_value, salt).hex()}"


def verify_password(client_value: str, stored: str) -> bool:
    salt_hex, _, digest_hex = stored.partition("$")
    try:
        salt = bytes.fromhex(salt_hex)
    except ValueError:
        salt = b"\0" * 16  # a damaged row still costs one scrypt and never matches
        digest_hex = ""
    return hmac.compare_digest(_scrypt(client_value, salt).hex(), digest_hex)


# Checked against when the user does not exist or is inactive: same cost, never a match.
_DUMMY_HASH = f"{'00' * 16}$"


async def ensure_default_users(session: AsyncSession, initial_password: str = "") -> None:
    """``admin`` and ``determined``, created once with ``initial_password`` (Determined's
    ``security.initial_user_password``; empty by default)."""
    for username, admin in DEFAULT_USERS:
        exists = await session.scalar(select(User.id).where(User.username == username))
        if exists is None:
            digest = await asyncio.to_thread(hash_password, client_password_value(initial_password, False))
            session.add(User(username=username, password_hash=digest, admin=admin,
                             role=Role.ADMIN if admin else Role.USER, active=True, created_at=utcnow()))


async def login(session: AsyncSession, username: str, password: str, is_hashed: bool) -> tuple[str, User]:
    user = await session.scalar(select(User).where(User.username == username))
    stored = user.password_hash if user is not None and user.active else _DUMMY_HASH
    matches = await asyncio.to_thread(verify_password, client_password_value(password, is_hashed), stored)
    if user is None or not user.active or not matches:
        raise Unauthenticated("invalid credentials")
    token = secrets.token_urlsafe(32)
    now = utcnow()
    session.add(UserSession(user_id=user.id, token_hash=token_hash(token), created_at=now,
                            expires_at=now + SESSION_LIFETIME))
    return token, user


async def user_for_token(session: AsyncSession, token: str) -> AuthedUser | None:
    row = (await session.execute(
        select(User, UserSession.expires_at)
        .join(UserSession, UserSession.user_id == User.id)
        .where(UserSession.token_hash == token_hash(token))
    )).first()
    if row is None:
        return None
    user, expires_at = row
    expires = aware(expires_at)
    if not user.active or expires is None or expires < utcnow():
        return None
    return AuthedUser(user.id, user.username, Role(user.role))


async def task_token_row(session: AsyncSession, key: str) -> tuple[str, str, int | None, str, int | None] | None:
    """For an allocation token's hash: (allocation id, task id, trial id, allocation state, the
    trial's current run id), None for no such token."""
    row = (await session.execute(
        select(Allocation.id, Allocation.task_id, Allocation.trial_id, Allocation.state, Trial.run_id)
        .outerjoin(Trial, Trial.id == Allocation.trial_id)
        .where(Allocation.token_hash == key))).first()
    return None if row is None else (row[0], row[1], row[2], row[3], row[4])


async def signed_in_at(session: AsyncSession, token: str) -> datetime | None:
    """When the login session behind ``token`` began; None for a token that is not one."""
    created = await session.scalar(select(UserSession.created_at).where(UserSession.token_hash == token_hash(token)))
    return aware(created)


async def logout(session: AsyncSession, token: str) -> None:
    s = await session.scalar(select(UserSession).where(UserSession.token_hash == token_hash(token)))
    if s is not None:
        await session.delete(s)


async def end_sessions(session: AsyncSession, tokens: TokenCaches, user_id: int, *,
                       keep_token: str | None = None) -> None:
    """End every session of a user (but ``keep_token``'s), in the database and in the cache."""
    q = delete(UserSession).where(UserSession.user_id == user_id)
    if keep_token is not None:
        q = q.where(UserSession.token_hash != token_hash(keep_token))
    await session.execute(q)
    tokens.forget_user(user_id)
