"""One exception hierarchy for the API, mapped to HTTP once in create_app.

Bodies have the shape the Determined client reads: {"message": m, "error": {"error": m}}.
"""

from __future__ import annotations


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


def error_body(message: str) -> dict:
    return {"message": message, "error": {"error": message}}
