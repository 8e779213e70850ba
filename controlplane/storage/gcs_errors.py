"""Google client failures (read by `controlplane.common.gcp_errors`) → the storage taxonomy, in this one place.

GCS status codes: https://cloud.google.com/storage/docs/json_api/v1/status-codes
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from controlplane.common.gcp_errors import parse
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
    failure = parse(exc)
    if failure is None:
        from google.cloud.storage.exceptions import DataCorruption

        if isinstance(exc, DataCorruption):
            return StorageError(f"GCS transfer for {where} failed its checksum ({_short(exc)})")
        return None
    if failure.not_found:
        if missing is CheckpointNotFound:
            return CheckpointNotFound(f"checkpoint not found at {where} (deleted, or never stored)")
        return BucketNotFound(f"GCS bucket {bucket!r} does not exist (checkpoint storage {where})")
    said = f"{failure.name}: {_short(exc)}"
    if failure.kind == "credentials" or failure.status in (401, 403):
        return AccessDenied(f"access to {where} denied ({said}); check the application default credentials "
                            "(or the VM's service account) and the bucket's IAM")
    if failure.kind == "unreachable" or failure.status in (429, 504) or (failure.status or 0) >= 500:
        return StorageUnavailable(f"GCS is unavailable for {where} ({said})")
    return StorageError(f"GCS request for {where} failed ({said})")


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def gcs_errors(*, bucket: str, where: str,
               missing: type[StorageError] = BucketNotFound) -> AbstractContextManager[None]:
    """Raises the taxonomy error for any GCS error inside the block (chained to the original)."""
    return translated(translate, bucket=bucket, where=where, missing=missing)
