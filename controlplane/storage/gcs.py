"""Checkpoints in a Google Cloud Storage bucket (google-cloud-storage, imported on first use).

Files move in parallel, up to ``max_workers`` at a time; files above 8 MiB go as resumable uploads
in ``gcs_chunk_size`` chunks, so memory stays bounded and a failed chunk is retried, not the file.
Credentials: application default credentials (or the VM's service account). With
``STORAGE_EMULATOR_HOST`` set, the client talks to that emulator with anonymous credentials.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from controlplane.storage._pool import run_all
from controlplane.storage.errors import BucketNotFound, CheckpointNotFound
from controlplane.storage.gcs_errors import gcs_errors
from controlplane.storage.object_store import ObjectStore
from controlplane.storage.transfer import TransferSettings

_CHUNK_ALIGN = 256 * 1024  # resumable chunks must be multiples of 256 KiB
_EMULATOR_MAX_WORKERS = 4


def make_client(http: Any = None) -> Any:
    """A ``google.cloud.storage.Client``: the emulator's when STORAGE_EMULATOR_HOST is set, else ADC.

    ``http`` (a requests.Session) replaces the transport; tests use it to inject faults.
    """
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):  # the client reads the endpoint from this too
        from google.auth.credentials import AnonymousCredentials

        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or "emulator"
        return storage.Client(project=project, credentials=AnonymousCredentials(), _http=http)
    return storage.Client(_http=http)


class GCSStorage(ObjectStore):
    scheme = "gs"

    def __init__(self, bucket: str, prefix: str | None = "", *, temp_dir: str | Path | None = None,
                 transfer: TransferSettings | None = None, client: Any = None) -> None:
        super().__init__(bucket, prefix, temp_dir=temp_dir, transfer=transfer)
        self._client = client
        self._lock = threading.Lock()
        size = self.transfer.gcs_chunk_size
        self._chunk = max(_CHUNK_ALIGN, -(-size // _CHUNK_ALIGN) * _CHUNK_ALIGN)
        self._workers = self.transfer.max_workers
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # gcp-storage-emulator is a single-threaded http.server with a listen backlog of 5:
            # further connections get their SYN dropped and stall a full second before the retry.
            self._workers = min(self._workers, _EMULATOR_MAX_WORKERS)

    def __repr__(self) -> str:
        return f"GCSStorage({self.where()!r})"

    @property
    def client(self) -> Any:
        """The storage client, built on first use (credential errors surface here as AccessDenied)."""
        with self._lock:
            if self._client is None:
                with gcs_errors(bucket=self.bucket, where=self.where()):
                    self._client = make_client()
            return self._client

    def _retry(self) -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(self.transfer.retry_deadline_s)

    def _list(self, key_prefix: str) -> dict[str, int]:
        with gcs_errors(bucket=self.bucket, where=self.where()):
            blobs = self.client.list_blobs(self.bucket, prefix=key_prefix, retry=self._retry())
            return {b.name: int(b.size or 0) for b in blobs}

    def _list_dirs(self, key_prefix: str) -> list[str]:
        with gcs_errors(bucket=self.bucket, where=self.where()):
            listing = self.client.list_blobs(self.bucket, prefix=key_prefix, delimiter="/", retry=self._retry())
            for _ in listing:  # prefixes fill in as pages are read
                pass
            return [p[len(key_prefix):].rstrip("/") for p in listing.prefixes]

    def _put(self, files: list[tuple[Path, str]], where: str) -> None:
        bucket, retry = self.client.bucket(self.bucket), self._retry()

        def upload(path: Path, key: str) -> None:
            bucket.blob(key, chunk_size=self._chunk).upload_from_filename(str(path), retry=retry)

        with gcs_errors(bucket=self.bucket, where=where, missing=BucketNotFound):
            run_all(upload, files, self._workers)

    def _get(self, objects: list[tuple[str, int, Path]], where: str) -> None:
        bucket, retry = self.client.bucket(self.bucket), self._retry()

        def download(key: str, _size: int, target: Path) -> None:
            bucket.blob(key).download_to_filename(str(target), retry=retry)

        with gcs_errors(bucket=self.bucket, where=where, missing=CheckpointNotFound):
            run_all(download, objects, self._workers)

    def _remove(self, key_prefix: str, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        bucket, retry = self.client.bucket(self.bucket), self._retry()

        def remove(key: str) -> None:
            try:
                bucket.blob(key).delete(retry=retry)
            except NotFound:  # deleted meanwhile: that is the goal
                pass

        with gcs_errors(bucket=self.bucket, where=f"{self.scheme}://{self.bucket}/{key_prefix}"):
            run_all(remove, [(k,) for k in keys], self._workers)
