"""Request-side helpers shared by the controllers.

The Determined client sends JSON without a Content-Type header and mixes camelCase with
snake_case (reference §0), so bodies are decoded by hand and fields are looked up in both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Request

from controlplane.master.errors import BadRequest

_decoder = msgspec.json.Decoder()


async def read_json(request: Request, *, default: Any = None) -> Any:
    body = await request.body()
    if not body.strip():
        return {} if default is None else default
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from e
    except RecursionError as e:  # msgspec's own depth limit (about 1,000 levels)
        raise BadRequest("request body is nested too deeply") from e


def field(body: dict, camel: str, default: Any = None) -> Any:
    """body[camel], else its snake_case twin, else default."""
    if camel in body:
        return body[camel]
    snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
    return body.get(snake, default)


def expect_dict(value: Any, name: str) -> dict:
    if not isinstance(value, dict):
        raise BadRequest(f"{name}: must be an object, got {type(value).__name__}")
    return value


def expect_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 40:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{name}: must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise BadRequest(f"{name}: must be >= {minimum}, got {value}")
    if not -(2**63) <= value <= 2**63 - 1:
        raise BadRequest(f"{name}: integer out of range (must fit in 64 bits)")
    return value


def parse_time(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name}: must be an RFC3339 timestamp, got {value!r}")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise BadRequest(f"{name}: must be an RFC3339 timestamp, got {value!r}") from e
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


MAX_ID = 2**31 - 1  # ids are 32-bit columns: a larger one is no row, and PostgreSQL refuses it


def path_int(value: str, name: str, *, minimum: int = 0, maximum: int = MAX_ID) -> int:
    """A path or query integer, refused with a 400 naming ``name`` outside [minimum, maximum]."""
    shown = value if len(value) <= 40 else value[:40] + "..."
    text = value.strip()
    if not text.lstrip("-").isdigit() or len(text) > 40:
        raise BadRequest(f"{name}: must be an integer from {minimum} to {maximum}, got {shown!r}")
    number = int(text)
    if not minimum <= number <= maximum:
        raise BadRequest(f"{name}: must be an integer from {minimum} to {maximum}, got {shown}")
    return number
