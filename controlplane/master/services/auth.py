"""Users, passwords and session tokens.

The Determined client hashes passwords before sending them (sha512 of a fixed salt and the
password; "" for the empty password), so the master stores a slow hash of that client value.
Tokens are random and stored only as sha256 hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, utcnow
from controlplane.master.db.models import User, UserSession
from controlplane.master.errors import Unauthenticated
from controlplane.master.principals import AuthedUser, Role

CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
SESSION_LIFETIME = timedelta(days=7)
DEFAULT_USERS = (("admin", True), ("determined", False))


def client_password_value(password: str, is_hashed: bool) -> str:
    """The value the Determined client would send for this password."""
    if is_hashed or password == "":
        return password
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def hash_password(client_value: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(client_value.encode(), salt=salt, n=2**14, r=8, p=1)
    return f"{salt.hex()}${digest.hex()}"


def verify_password(client_value: str, stored: str) -> bool:
    salt_hex, _, digest_hex = stored.partition("$")
    digest = hashlib.scrypt(client_value.encode(), salt=bytes.fromhex(salt_hex), n=2**14, r=8, p=1)
    return hmac.compare_digest(digest.hex(), digest_hex)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def ensure_default_users(session: AsyncSession) -> None:
    for username, admin in DEFAULT_USERS:
        exists = await session.scalar(select(User.id).where(User.username == username))
        if exists is None:
            session.add(User(username=username, password_hash=hash_password(""), admin=admin,
                             role=Role.ADMIN if admin else Role.USER, active=True, created_at=utcnow()))


async def login(session: AsyncSession, username: str, password: str, is_hashed: bool) -> tuple[str, User]:
    user = await session.scalar(select(User).where(User.username == username))
    if user is None or not user.active or not verify_password(client_password_value(password, is_hashed),
                                                              user.password_hash):
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
    if not user.active or aware(expires_at) < utcnow():
        return None
    return AuthedUser(user.id, user.username, Role(user.role))


async def logout(session: AsyncSession, token: str) -> None:
    s = await session.scalar(select(UserSession).where(UserSession.token_hash == token_hash(token)))
    if s is not None:
        await session.delete(s)


async def set_password(session: AsyncSession, user_id: int, client_value: str) -> None:
    user = await session.get(User, user_id)
    if user is None:
        raise Unauthenticated("no such user")
    user.password_hash = hash_password(client_value)
