"""Each S3 failure lands on one taxonomy type, and the message names where."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, ReadTimeoutError

from controlplane.storage import AccessDenied, BucketNotFound, CheckpointNotFound, StorageError, StorageUnavailable
from controlplane.storage.s3_errors import s3_errors, translate

WHERE = "s3://bkt/p/u1/"


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} happened"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


@pytest.mark.parametrize("exc, missing, expected", [
    (client_error("NoSuchBucket", 404), CheckpointNotFound, BucketNotFound),
    (client_error("NoSuchKey", 404), CheckpointNotFound, CheckpointNotFound),
    (client_error("404", 404), CheckpointNotFound, CheckpointNotFound),
    (client_error("404", 404), BucketNotFound, BucketNotFound),
    (client_error("AccessDenied", 403), BucketNotFound, AccessDenied),
    (client_error("InvalidAccessKeyId", 403), BucketNotFound, AccessDenied),
    (client_error("SignatureDoesNotMatch", 403), BucketNotFound, AccessDenied),
    (client_error("SlowDown", 503), BucketNotFound, StorageUnavailable),
    (client_error("InternalError", 500), BucketNotFound, StorageUnavailable),
    (client_error("EntityTooSmall", 400), BucketNotFound, StorageError),
    (NoCredentialsError(), BucketNotFound, AccessDenied),
    (EndpointConnectionError(endpoint_url="http://x"), BucketNotFound, StorageUnavailable),
    (ReadTimeoutError(endpoint_url="http://x"), BucketNotFound, StorageUnavailable),
])
def test_translation(exc, missing, expected):
    mapped = translate(exc, bucket="bkt", where=WHERE, missing=missing)
    assert type(mapped) is expected
    assert WHERE in str(mapped) or "'bkt'" in str(mapped)


def test_other_errors_pass_through():
    assert translate(ValueError("x"), bucket="bkt", where=WHERE) is None
    with pytest.raises(OSError, match="disk"):
        with s3_errors(bucket="bkt", where=WHERE):
            raise OSError("disk")


def test_the_original_is_chained():
    with pytest.raises(StorageUnavailable) as caught:
        with s3_errors(bucket="bkt", where=WHERE):
            raise client_error("SlowDown", 503)
    assert isinstance(caught.value.__cause__, ClientError)
