"""The one place where Google client errors become our sentences (preflight and `down`'s cleanup).

google.api_core exceptions carry the API's own message; google.auth raises its own when no
credentials are found. Both are kept as the provider said them. Imported lazily.
"""

from __future__ import annotations

import re
from typing import Any

_REQUEST_PREFIX = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ")


def message(exc: BaseException) -> str:
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    # The REST transport prefixes the request ("GET https://...: "): the message is what follows.
    return _REQUEST_PREFIX.sub("", text) or type(exc).__name__


def is_credentials_error(exc: BaseException) -> bool:
    from google.api_core import exceptions as gex
    from google.auth import exceptions as auth_ex

    return isinstance(exc, (auth_ex.GoogleAuthError, gex.Unauthenticated))


def is_not_found(exc: BaseException) -> bool:
    from google.api_core import exceptions as gex

    return isinstance(exc, gex.NotFound)


def sdk_errors() -> tuple[type[BaseException], ...]:
    from google.api_core import exceptions as gex
    from google.auth import exceptions as auth_ex

    return (gex.GoogleAPIError, auth_ex.GoogleAuthError)


def operation_error(op: Any) -> str | None:
    """A zone operation that finished with an error: its message (read by the provisioners' one
    reading of operations), else None."""
    from provisioners.gce_errors import operation_error as read_operation_error

    err = read_operation_error(op)
    return err.provider_message if err is not None else None
