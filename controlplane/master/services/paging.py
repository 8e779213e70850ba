"""Pages of a long listing: Determined's pagination object plus a keyset cursor.

A page is at most ``MAX_PAGE`` rows, so no answer grows with the data. ``offset``/``limit`` work
as in Determined (the database skips ``offset`` rows, fine for the first pages a UI shows); a
client reading everything follows ``nextCursor`` instead: the cursor holds the last row's sort
key, so every page is an indexed range read however deep it is. The cursor also carries the
page's offset and the ``total`` counted for the first page (counting again per page would scan
the whole listing each time), so a cursor page's ``total`` is as of the first page.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from controlplane.master.errors import BadRequest

DEFAULT_PAGE = 1000
MAX_PAGE = 10_000
MAX_INT64 = 2**63 - 1

class Pagination(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Pagination."""

    offset: int
    limit: int
    start_index: int
    end_index: int
    total: int


def page_size(limit: int) -> int:
    return limit if limit > 0 else MAX_PAGE


def pagination(offset: int, limit: int, total: int, count: int) -> Pagination:
    return Pagination(offset=offset, limit=limit, start_index=offset, end_index=offset + count,
                      total=max(total, offset + count))


def encode_cursor(offset: int, total: int, key: list[Any]) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([offset, total, *key])).decode().rstrip("=")


def decode_cursor(cursor: str, key_type: Any) -> tuple[int, int, Any]:
    """(offset, total, key) of a cursor this master made; anything else is a 400 naming ``cursor``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        offset, total, *key = msgspec.json.decode(raw, type=list[Any])
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT64 for v in (offset, total)):
            raise ValueError("offset and total must be non-negative integers")
        return offset, total, msgspec.convert(key, key_type)
    except (binascii.Error, ValueError, TypeError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadRequest(f"cursor: not a cursor of this listing ({e})") from e


def one_of_offset_or_cursor(offset: int, cursor: str | None) -> None:
    if cursor is not None and offset:
        raise BadRequest("offset: give either offset or cursor, not both")
