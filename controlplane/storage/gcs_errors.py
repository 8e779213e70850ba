"""google-api-core / google-auth / transport errors → the storage taxonomy, in this one place.

GCS status codes: https://cloud.google.com/storage/docs/json_api/v1/status-codes
"""

from __future__ import annotations

from controlplane.storage.errors import (
    AccessDenied,
    BucketNotFound,
    CheckpointNotFound,
    StorageError,
    StorageUnavailable,
    translated,
)


def translate(exc: BaseException, *, bucket: str, where: str,
              missing: type[StorageError] = BucketNotFound) -> StorageError | None:
    """The taxonomy error for ``exc``, or None when it is not a GCS error (re-raise it as is).

    A 404 carries no reliable machine-readable cause, so ``missing`` says what it means where the
    call was made: CheckpointNotFound for an object read after a successful listing, else
    BucketNotFound (listing or writing can only miss the bucket).
    """
    import requests
    from google.api_core import exceptions as gx
    from google.auth import exceptions as ax

    if isinstance(exc, gx.RetryError) and exc.cause is not None:  # retried until the deadline
        inner = translate(exc.cause, bucket=bucket, where=where, missing=missing)
        return inner or StorageUnavailable(f"GCS kept failing for {where} ({exc})")
    if isinstance(exc, gx.NotFound):
        if missing is CheckpointNotFound:
            return CheckpointNotFound(f"checkpoint not found at {where} (deleted, or never stored)")
        return BucketNotFound(f"GCS bucket {bucket!r} does not exist (checkpoint storage {where})")
    if isinstance(exc, (gx.Forbidden, gx.Unauthorized, ax.DefaultCredentialsError, ax.RefreshError)):
        return AccessDenied(f"access to {where} denied ({type(exc).__name__}: {_short(exc)}); check the "
                            "application default credentials (or the VM's service account) and the bucket's IAM")
    if isinstance(exc, (gx.TooManyRequests, gx.ServerError, gx.RetryError, gx.DeadlineExceeded,
                        requests.ConnectionError, requests.Timeout, ax.TransportError, ConnectionError,
                        TimeoutError)):
        return StorageUnavailable(f"GCS is unavailable for {where} ({type(exc).__name__}: {_short(exc)})")
    if isinstance(exc, (gx.GoogleAPICallError, ax.GoogleAuthError)):
        return StorageError(f"GCS request for {where} failed ({type(exc).__name__}: {_short(exc)})")
    from google.cloud.storage.exceptions import DataCorruption

    if isinstance(exc, DataCorruption):
        return StorageError(f"GCS transfer for {where} failed its checksum ({_short(exc)})")
    return None


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def gcs_errors(*, bucket: str, where: str, missing: type[StorageError] = BucketNotFound):
    """Raises the taxonomy error for any GCS error inside the block (chained to the original)."""
    return translated(translate, bucket=bucket, where=where, missing=missing)
