"""One error taxonomy for checkpoint storage, whatever the backend.

Callers (the core API, the GC, the CLI) read only these types. Each cloud module maps its SDK's
errors onto them in one place (``s3_errors``, ``gcs_errors``). Messages name the bucket, prefix
and checkpoint uuid; they never carry credentials.
"""

from __future__ import annotations


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
