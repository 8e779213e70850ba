"""AWS failures (read by `controlplane.common.aws_errors`) → the storage taxonomy, in this one place.

S3 error codes: https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from controlplane.common.aws_errors import parse
from controlplane.storage.errors import (
    AccessDenied,
    BucketNotFound,
    CheckpointNotFound,
    StorageError,
    StorageUnavailable,
    translated,
)

_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
           "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "InvalidClientTokenId", "401", "403"}
_UNAVAILABLE = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                "ThrottlingException", "RequestLimitExceeded", "500", "502", "503", "504"}
_NO_OBJECT = {"NoSuchKey", "NotFound", "404"}


def translate(exc: BaseException, *, bucket: str, where: str,
              missing: type[StorageError] = BucketNotFound) -> StorageError | None:
    """The taxonomy error for ``exc``, or None when it is not an S3 error (re-raise it as is).

    ``missing`` says what a missing key means where the call was made: a checkpoint that is not
    there (downloads) or, where only the bucket can be missing, BucketNotFound.
    """
    failure = parse(exc)
    if failure is None:
        return None
    if failure.kind == "api":
        code = failure.code or str(failure.status or "")
        detail = f"{code}: {failure.message}"
        if code == "NoSuchBucket":
            return BucketNotFound(f"S3 bucket {bucket!r} does not exist (checkpoint storage {where})")
        if code in _NO_OBJECT:
            if missing is CheckpointNotFound:
                return CheckpointNotFound(f"checkpoint not found at {where} (deleted, or never stored)")
            return BucketNotFound(f"S3 bucket {bucket!r} does not exist (checkpoint storage {where})")
        if code in _DENIED:
            return AccessDenied(f"access to {where} denied ({detail}); check checkpoint_storage "
                                "access_key/secret_key or this machine's AWS credentials")
        if code in _UNAVAILABLE:
            return StorageUnavailable(f"S3 is unavailable for {where} ({detail})")
        return StorageError(f"S3 request for {where} failed ({detail})")
    if failure.kind == "credentials":
        return AccessDenied(f"no usable AWS credentials for {where}: set checkpoint_storage access_key and "
                            "secret_key, or configure the AWS credential chain")
    if failure.kind == "unreachable":
        return StorageUnavailable(f"S3 endpoint unreachable for {where} ({failure.message})")
    return StorageError(f"S3 request for {where} failed ({failure.message})")


def s3_errors(*, bucket: str, where: str,
              missing: type[StorageError] = BucketNotFound) -> AbstractContextManager[None]:
    """Raises the taxonomy error for any S3 error inside the block (chained to the original)."""
    return translated(translate, bucket=bucket, where=where, missing=missing)
