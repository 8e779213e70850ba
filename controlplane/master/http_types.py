"""Litestar's connection types as every handler and guard of this master takes them (its user, auth
and state types are not used: the principal comes from ``api/auth_guard.py``)."""

from __future__ import annotations

from typing import Any, TypeAlias

from litestar import Request, WebSocket
from litestar.connection import ASGIConnection

AnyRequest: TypeAlias = Request[Any, Any, Any]
AnyWebSocket: TypeAlias = WebSocket[Any, Any, Any]
AnyConnection: TypeAlias = ASGIConnection[Any, Any, Any, Any]
