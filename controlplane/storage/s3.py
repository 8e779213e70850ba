"""Checkpoints in an S3 or S3-compatible bucket (boto3, imported on first use).

All files of a checkpoint go through one s3transfer ``TransferManager``: up to ``max_workers``
requests in flight over every file and part, files ≥ ``multipart_threshold`` as parallel multipart
uploads and ranged parallel GETs. Credentials: ``access_key``/``secret_key`` when given, else the
AWS chain (environment, profile, instance role). ``endpoint_url`` targets MinIO, moto and the like.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from controlplane.storage.errors import BucketNotFound, CheckpointNotFound, StorageError
from controlplane.storage.object_store import ObjectStore
from controlplane.storage.s3_errors import s3_errors
from controlplane.storage.transfer import TransferSettings

_DELETE_BATCH = 1000  # the DeleteObjects limit


class S3Storage(ObjectStore):
    scheme = "s3"

    def __init__(self, bucket: str, prefix: str | None = "", *, endpoint_url: str | None = None,
                 access_key: str | None = None, secret_key: str | None = None,
                 temp_dir: str | Path | None = None, transfer: TransferSettings | None = None,
                 client: Any = None) -> None:
        super().__init__(bucket, prefix, temp_dir=temp_dir, transfer=transfer)
        self.endpoint_url = endpoint_url
        self._access_key = access_key
        self._secret_key = secret_key
        self._client = client
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the keys
        return f"S3Storage({self.where()!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def client(self) -> Any:
        """The boto3 S3 client (thread-safe), built on first use; tests register event hooks on it."""
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        t = self.transfer
        config = Config(
            retries={"mode": "standard", "total_max_attempts": t.attempts},
            max_pool_connections=t.max_workers + 2,
            # S3-compatible stores (MinIO, moto) rarely resolve bucket subdomains.
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        session = boto3.session.Session(aws_access_key_id=self._access_key, aws_secret_access_key=self._secret_key)
        with s3_errors(bucket=self.bucket, where=self.where()):
            return session.client("s3", endpoint_url=self.endpoint_url, config=config)

    def _transfer_manager(self) -> Any:
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        t = self.transfer
        config = TransferConfig(multipart_threshold=t.multipart_threshold, multipart_chunksize=t.part_size,
                                max_concurrency=t.max_workers, use_threads=True,
                                preferred_transfer_client="classic")
        return create_transfer_manager(self.client, config)

    def _list(self, key_prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        with s3_errors(bucket=self.bucket, where=self.where()):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=key_prefix):
                out.update((o["Key"], o["Size"]) for o in page.get("Contents", []))
        return out

    def _list_dirs(self, key_prefix: str) -> list[str]:
        names = []
        with s3_errors(bucket=self.bucket, where=self.where()):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=key_prefix, Delimiter="/")
            for page in pages:
                names += [p["Prefix"][len(key_prefix):].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return names

    def _put(self, files: list[tuple[Path, str]], where: str) -> None:
        with s3_errors(bucket=self.bucket, where=where), self._transfer_manager() as manager:
            futures = [manager.upload(str(path), self.bucket, key) for path, key in files]
            for future in futures:
                future.result()  # the first failure leaves the `with`, which cancels the rest

    def _get(self, objects: list[tuple[str, int, Path]], where: str) -> None:
        with s3_errors(bucket=self.bucket, where=where, missing=CheckpointNotFound), \
                self._transfer_manager() as manager:
            futures = [manager.download(self.bucket, key, str(target), subscribers=[_known_size(size)])
                       for key, size, target in objects]
            for future in futures:
                future.result()

    def _remove(self, key_prefix: str, keys: list[str]) -> None:
        where = f"{self.scheme}://{self.bucket}/{key_prefix}"
        with s3_errors(bucket=self.bucket, where=where, missing=BucketNotFound):
            for i in range(0, len(keys), _DELETE_BATCH):
                batch = [{"Key": k} for k in keys[i:i + _DELETE_BATCH]]
                answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise StorageError(f"deleting {len(answer['Errors'])} objects under {where} failed "
                                       f"({first.get('Code')}: {first.get('Message')})")
            # Parts of an interrupted multipart upload are invisible to listings but still stored.
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=key_prefix)
            for page in pages:
                for upload in page.get("Uploads", []):
                    self._abort(upload["Key"], upload["UploadId"])

    def _abort(self, key: str, upload_id: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "NoSuchUpload":  # already gone
                raise


def _known_size(size: int) -> Any:
    """A subscriber that hands s3transfer the size we listed, saving a HEAD request per file."""
    return _known_size_class()(size)


@functools.cache
def _known_size_class() -> type:
    from s3transfer.subscribers import BaseSubscriber

    class KnownSize(BaseSubscriber):
        def __init__(self, size: int) -> None:
            self.size = size

        def on_queued(self, future: Any, **kwargs: Any) -> None:
            future.meta.provide_transfer_size(self.size)

    return KnownSize
