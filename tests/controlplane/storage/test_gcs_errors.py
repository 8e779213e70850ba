"""Each GCS failure lands on one taxonomy type, and the message names where."""

from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as gx
from google.auth.exceptions import DefaultCredentialsError

from controlplane.storage import AccessDenied, BucketNotFound, CheckpointNotFound, StorageError, StorageUnavailable
from controlplane.storage.gcs_errors import gcs_errors, translate

WHERE = "gs://bkt/p/u1/"


@pytest.mark.parametrize("exc, missing, expected", [
    (gx.NotFound("no such object"), CheckpointNotFound, CheckpointNotFound),
    (gx.NotFound("no such bucket"), BucketNotFound, BucketNotFound),
    (gx.Forbidden("no storage.objects.create"), BucketNotFound, AccessDenied),
    (gx.Unauthorized("bad token"), BucketNotFound, AccessDenied),
    (DefaultCredentialsError("no ADC"), BucketNotFound, AccessDenied),
    (gx.ServiceUnavailable("down"), BucketNotFound, StorageUnavailable),
    (gx.TooManyRequests("slow down"), BucketNotFound, StorageUnavailable),
    (gx.RetryError("deadline", cause=requests.ConnectionError("refused")), BucketNotFound, StorageUnavailable),
    (gx.RetryError("deadline", cause=gx.Forbidden("x")), BucketNotFound, AccessDenied),
    (requests.ConnectionError("refused"), BucketNotFound, StorageUnavailable),
    (gx.BadRequest("bad"), BucketNotFound, StorageError),
])
def test_translation(exc, missing, expected):
    mapped = translate(exc, bucket="bkt", where=WHERE, missing=missing)
    assert type(mapped) is expected
    assert WHERE in str(mapped) or "'bkt'" in str(mapped)


def test_other_errors_pass_through():
    assert translate(KeyError("x"), bucket="bkt", where=WHERE) is None
    with pytest.raises(OSError, match="disk"):
        with gcs_errors(bucket="bkt", where=WHERE):
            raise OSError("disk")
