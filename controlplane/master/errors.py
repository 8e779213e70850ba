"""One exception hierarchy for the API, mapped to HTTP once in create_app.

Bodies have the shape the Determined client reads, {"message": m, "error": {"error": m}}, plus
the ``status_code`` and ``detail`` of the error schema Litestar documents for every route, so
answers match the served OpenAPI schema.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ApiError):
    status = 400


class Unauthenticated(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class PayloadTooLarge(ApiError):
    status = 413


class TooManyRequests(ApiError):
    status = 429


def error_body(message: str, status: int = 500) -> dict[str, Any]:
    return {"message": message, "error": {"error": message}, "status_code": status, "detail": message}
