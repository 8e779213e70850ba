"""Failures seen through the taxonomy: missing bucket, bad credentials, an outage mid-upload."""

from __future__ import annotations

import uuid

import pytest

from controlplane.storage import AccessDenied, BucketNotFound, GCSStorage, S3Storage, StorageUnavailable
from controlplane.storage.gcs import make_client
from tests.controlplane.storage.checkpoints import write_tree
from tests.controlplane.storage.conftest import PREFIX, SMALL
from tests.controlplane.storage.faults import FaultySession, Outage, s3_outage_hook


def test_a_missing_bucket_is_named(cloud, tmp_path):
    storage = cloud.build(bucket="no-such-bucket-4711")
    with pytest.raises(BucketNotFound, match="no-such-bucket-4711") as caught:
        with storage.store_path("ckpt-1") as path:
            write_tree(path)
    assert "nothing was written" in str(caught.value)
    for call in (lambda: storage.download("ckpt-1", tmp_path), lambda: storage.resources("ckpt-1"),
                 storage.list_checkpoints):
        with pytest.raises(BucketNotFound, match="'no-such-bucket-4711' does not exist"):
            call()


def test_s3_bad_credentials_are_access_denied(s3_bucket, tmp_path):
    storage = S3Storage(s3_bucket.name, "p", endpoint_url=s3_bucket.endpoint_url, access_key="AKIAWRONGWRONGWRONG",
                        secret_key="sekrit-should-never-print", transfer=SMALL)
    with s3_bucket.enforce_auth():  # moto checks keys now: a real InvalidAccessKeyId 403
        with pytest.raises(AccessDenied, match="InvalidAccessKeyId") as caught:
            with storage.store_path("ckpt-1") as path:
                (path / "w").write_bytes(b"x")
        with pytest.raises(AccessDenied):
            storage.resources("ckpt-1")
    assert "sekrit" not in str(caught.value) and "sekrit" not in repr(storage)
    assert s3_bucket.name in str(caught.value)


def test_s3_without_any_credentials_is_access_denied(s3_bucket, monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    storage = S3Storage(s3_bucket.name, endpoint_url=s3_bucket.endpoint_url, transfer=SMALL)
    with pytest.raises(AccessDenied, match="no usable AWS credentials"):
        storage.resources("ckpt-1")


def test_gcs_bad_credentials_are_access_denied(gcs_bucket):
    storage = GCSStorage(gcs_bucket.name, "p", transfer=SMALL, client=make_client(http=FaultySession(forbidden=True)))
    with pytest.raises(AccessDenied, match="storage.objects.create access") as caught:
        with storage.store_path("ckpt-1") as path:
            (path / "w").write_bytes(b"x")
    assert gcs_bucket.name in str(caught.value)


def faulty(cloud, outage: Outage):
    """The store under test with an outage wired into its HTTP layer."""
    if cloud.kind == "s3":
        storage = cloud.build()
        storage.client.meta.events.register("before-send.s3", s3_outage_hook(outage))
        return storage
    return GCSStorage(cloud.config["bucket"], PREFIX, transfer=SMALL,
                      client=make_client(http=FaultySession(outage=outage)))


def test_an_outage_mid_upload_leaves_no_half_checkpoint(cloud, s3_bucket_or_none):
    outage = Outage(start_after=3, recover_after=2)
    storage = faulty(cloud, outage)
    ckpt_uuid = str(uuid.uuid4())

    with pytest.raises(StorageUnavailable, match=rf"checkpoint {ckpt_uuid} was not stored") as caught:
        with storage.store_path(ckpt_uuid) as path:
            write_tree(path)

    assert outage.writes > outage.start_after  # writes went through, then failed
    assert outage.failed_listings >= 1 and outage.over  # the cleanup itself met the outage, then it ended
    assert "the partial upload was removed" in str(caught.value)
    assert cloud.stored(ckpt_uuid) == []
    if s3_bucket_or_none is not None:  # parts of an aborted multipart upload are stored, just not listed
        assert s3_bucket_or_none.multipart_uploads() == []


@pytest.fixture
def s3_bucket_or_none(cloud, request):
    return request.getfixturevalue("s3_bucket") if cloud.kind == "s3" else None


def test_large_files_go_in_parts(cloud, s3_bucket_or_none):
    storage, session = cloud.build(), FaultySession()  # a session that only records
    if cloud.kind == "gcs":
        storage = GCSStorage(cloud.config["bucket"], PREFIX, transfer=SMALL, client=make_client(http=session))
    with storage.store_path("ckpt-1") as path:
        write_tree(path)  # one 20 MiB file; parts are 5 MiB
    if s3_bucket_or_none is not None:
        etag = s3_bucket_or_none.client().head_object(
            Bucket=s3_bucket_or_none.name, Key="team/exp/ckpt-1/model/weights.bin")["ETag"]
        assert etag.strip('"').endswith("-5")  # a multipart ETag names its part count
    else:
        chunks = [url for method, url in session.seen if method == "PUT" and "upload_id=" in url]
        assert len(chunks) == 5  # resumable upload, 5 MiB per request
