"""Request-side helpers shared by the controllers.

Bodies are msgspec Structs decoded by Litestar at the edge; what is left here is the one check
for integers that arrive as repeated query strings (lists of ids), which Litestar cannot bound.
"""

from __future__ import annotations

from controlplane.master.errors import BadRequest

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
