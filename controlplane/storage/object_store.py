"""The ``StorageManager`` contract over a bucket: objects at ``<prefix>/<uuid>/<relpath>``.

This class owns the key layout, local staging and the all-or-nothing upload; a cloud subclass
(``s3.S3Storage``, ``gcs.GCSStorage``) only lists, moves and removes objects, and raises only the
``errors`` taxonomy. A checkpoint exists in a bucket when at least one object is under its uuid,
so a failed upload deletes what it wrote before it reports the failure.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from controlplane.storage.base import StorageManager, check_uuid, local_files, safe_destination
from controlplane.storage.errors import BucketNotFound, CheckpointNotFound, StorageError, StorageUnavailable
from controlplane.storage.transfer import TransferSettings

log = logging.getLogger("controlplane.storage")


def normalize_prefix(prefix: str | None) -> str:
    """``"/a//b/"`` → ``"a/b"``; a prefix may not climb out of the bucket's namespace."""
    parts = [p for p in (prefix or "").split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"checkpoint_storage.prefix {prefix!r} may not contain '.' or '..' components")
    return "/".join(parts)


class ObjectStore(StorageManager):
    """``bucket`` and ``prefix`` locate the checkpoints; ``temp_dir`` holds staging and restore
    copies (system temp by default); ``transfer`` tunes the backend."""

    scheme = "object"

    def __init__(self, bucket: str, prefix: str | None = "", *, temp_dir: str | Path | None = None,
                 transfer: TransferSettings | None = None) -> None:
        if not bucket:
            raise ValueError("checkpoint_storage.bucket is required")
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self.temp_dir = str(temp_dir) if temp_dir else None
        self.transfer = transfer or TransferSettings()

    # What a cloud backend implements. Each raises only StorageError subclasses.

    @abc.abstractmethod
    def _list(self, key_prefix: str) -> dict[str, int]:
        """{key: size} of every object whose key starts with ``key_prefix``."""

    @abc.abstractmethod
    def _list_dirs(self, key_prefix: str) -> list[str]:
        """Names of the "directories" directly under ``key_prefix``."""

    @abc.abstractmethod
    def _put(self, files: list[tuple[Path, str]], where: str) -> None:
        """Uploads every (local path, key); returns only when all are stored, else raises."""

    @abc.abstractmethod
    def _get(self, objects: list[tuple[str, int, Path]], where: str) -> None:
        """Downloads every (key, size, local path); a vanished key is CheckpointNotFound."""

    @abc.abstractmethod
    def _remove(self, key_prefix: str, keys: list[str]) -> None:
        """Deletes ``keys`` (already-missing ones are fine) and any unfinished upload under the prefix."""

    # The contract, in terms of the above.

    def where(self, ckpt_uuid: str = "") -> str:
        """The URL of a checkpoint (or of the store), for messages."""
        return f"{self.scheme}://{self.bucket}/{self._key_prefix(ckpt_uuid) if ckpt_uuid else self._root()}"

    def _root(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def _key_prefix(self, ckpt_uuid: str) -> str:
        return f"{self._root()}{check_uuid(ckpt_uuid)}/"

    @contextlib.contextmanager
    def store_path(self, ckpt_uuid: str) -> Iterator[Path]:
        check_uuid(ckpt_uuid)
        with tempfile.TemporaryDirectory(prefix=f"ckpt-{ckpt_uuid[:8]}-", dir=self.temp_dir) as staging:
            yield Path(staging)
            self.upload_dir(Path(staging), ckpt_uuid)

    def upload_dir(self, src: Path, ckpt_uuid: str) -> None:
        key_prefix = self._key_prefix(ckpt_uuid)
        files = [(path, key_prefix + rel) for rel, path in sorted(local_files(Path(src)).items())]
        try:
            self._put(files, self.where(ckpt_uuid))
        except StorageError as e:
            outcome = "nothing was written" if isinstance(e, BucketNotFound) else self._discard(ckpt_uuid)
            raise type(e)(f"checkpoint {ckpt_uuid} was not stored: {e}; {outcome}") from e
        except BaseException:  # a local read error or an interrupt: still no half checkpoint
            self._discard(ckpt_uuid)
            raise

    def download(self, ckpt_uuid: str, dst: Path) -> None:
        dst = Path(dst)
        plan = [(key, size, safe_destination(dst, rel)) for rel, (key, size) in self._stored(ckpt_uuid).items()]
        for _key, _size, target in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
        self._get(plan, self.where(ckpt_uuid))

    def download_files(self, ckpt_uuid: str, relpaths: list[str], dst: Path) -> None:
        dst = Path(dst)
        key_prefix = self._key_prefix(ckpt_uuid)
        plan = []
        for rel in relpaths:
            key = key_prefix + rel
            size = self._list(key).get(key)  # a listing of that one key (and any longer ones): not the whole checkpoint
            if size is None or rel.startswith("/") or ".." in rel.split("/"):
                raise CheckpointNotFound(f"checkpoint {ckpt_uuid} has no file {rel!r} at {self.where(ckpt_uuid)}")
            plan.append((key, size, safe_destination(dst, rel)))
        for _key, _size, target in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
        self._get(plan, self.where(ckpt_uuid))

    @contextlib.contextmanager
    def restore_path(self, ckpt_uuid: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix=f"restore-{ckpt_uuid[:8]}-", dir=self.temp_dir) as tmp:
            self.download(ckpt_uuid, Path(tmp))
            yield Path(tmp)

    def delete(self, ckpt_uuid: str) -> None:
        key_prefix = self._key_prefix(ckpt_uuid)
        self._remove(key_prefix, sorted(self._list(key_prefix)))

    def delete_files(self, ckpt_uuid: str, relpaths: list[str]) -> None:
        key_prefix = self._key_prefix(ckpt_uuid)
        keys = sorted({key_prefix + rel for rel in relpaths if rel and not rel.startswith("/")
                       and ".." not in rel.split("/")})
        if keys:
            self._remove(key_prefix, keys)

    def resources(self, ckpt_uuid: str) -> dict[str, int]:
        return {rel: size for rel, (_key, size) in self._stored(ckpt_uuid).items()}

    def list_checkpoints(self) -> list[str]:
        return sorted(self._list_dirs(self._root()))

    def _stored(self, ckpt_uuid: str) -> dict[str, tuple[str, int]]:
        key_prefix = self._key_prefix(ckpt_uuid)
        found = {key[len(key_prefix):]: (key, size) for key, size in self._list(key_prefix).items()}
        if not found:
            raise CheckpointNotFound(f"checkpoint {ckpt_uuid} not found at {self.where(ckpt_uuid)} "
                                     "(deleted, or never stored)")
        return found

    def _discard(self, ckpt_uuid: str) -> str:
        """Best-effort removal of a failed upload. Only an outage is worth waiting out (they are often
        short); a missing bucket or denied access will not heal while we retry."""
        deadline = time.monotonic() + self.transfer.cleanup_deadline_s
        delay = 0.1
        while True:
            try:
                self.delete(ckpt_uuid)
                return "the partial upload was removed"
            except StorageError as e:
                last = e
            if not isinstance(last, StorageUnavailable) or time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        log.warning("could not remove the partial upload of checkpoint %s: %s", ckpt_uuid, last)
        return f"removing the partial upload failed too ({last}): delete({ckpt_uuid!r}) removes what remains"
