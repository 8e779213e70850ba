"""The one place where botocore errors become our sentences (preflight and `down`'s cleanup).

The provider's own message is kept (users search for it), with its code; nothing says "check
the console". botocore is imported lazily so that importing `infra` stays cheap.
"""

from __future__ import annotations


class AwsError(Exception):
    """An AWS call failed; `code` is AWS's error code ("" for client-side failures)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def code_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def message(exc: BaseException) -> str:
    """The provider's message and code: "The security token ... is invalid. (InvalidClientTokenId)"."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and response.get("Error"):
        err = response["Error"]
        text = str(err.get("Message") or err.get("Code") or exc).strip()
        return f"{text} ({err['Code']})" if err.get("Code") and err["Code"] not in text else text
    return str(exc).strip() or type(exc).__name__


def translate(exc: BaseException) -> AwsError:
    return AwsError(message(exc), code_of(exc))


def sdk_errors() -> tuple[type[BaseException], ...]:
    """The exceptions boto3 raises for a failed call: what `except` clauses around AWS calls catch."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)
