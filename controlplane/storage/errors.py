"""One error taxonomy for checkpoint storage, whatever the backend.

Callers (the core API, the GC, the CLI) read only these types. Each cloud module maps its SDK's
errors onto them in one place (``s3_errors``, ``gcs_errors``). Messages name the bucket, prefix
and checkpoint uuid; they never carry credentials.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


class StorageError(Exception):
    """A storage operation failed; the message says which store and which checkpoint."""


class BucketNotFound(StorageError):
    """The configured bucket does not exist (or is not visible to these credentials)."""


class AccessDenied(StorageError):
    """The credentials are missing, invalid, or lack permission for this bucket."""


class StorageUnavailable(StorageError):
    """The store could not be reached or kept failing (outage, throttling, timeouts): retry later."""


class CheckpointNotFound(StorageError, FileNotFoundError):
    """No checkpoint with that uuid is in the store (never stored, or deleted).

    Also a FileNotFoundError, as callers written for directory storage expect.
    """


class CheckpointChanged(StorageError):
    """A checkpoint's file differs from the sha256 recorded when it was reported (changed, missing or
    added since): it is refused, never loaded. ``path`` is the file's name in the checkpoint."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


@contextlib.contextmanager
def translated(translate: Callable[..., StorageError | None], **where: object) -> Iterator[None]:
    """Raises ``translate(exc, **where)`` for an SDK error inside the block (chained to it); our
    own errors and what ``translate`` does not know (None) go through unchanged."""
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        mapped = translate(e, **where)
        if mapped is None:
            raise
        raise mapped from e
