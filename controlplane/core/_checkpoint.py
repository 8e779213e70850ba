"""ctx.checkpoint: write files to storage, then report them; the report is the commit point.

Mirrors determined.core.CheckpointContext: ``store_path(metadata)`` yields ``(path, uuid)``,
``upload``, ``download``, ``restore_path``, ``get_metadata``, ``delete``. A checkpoint is reported
only after every file is in place, and only after the metrics reported before it were
acknowledged (Determined can invert that order; the master here relies on it).

With several workers, ``shard=False`` is the chief's alone (another rank gets a RuntimeError, as
in Determined). ``shard=True`` is a step every worker takes together: the chief picks the uuid and
broadcasts it, each worker writes its own files into its own directory, the metadata of all
workers is merged (a key two workers give different values is a conflict), a file two workers
wrote is stored once if the contents agree and refused if they differ, every worker stores its
files under that uuid, and once all have finished the chief reports the checkpoint once. If any
worker fails (while writing or storing) every worker raises, and nothing is reported.

A report carries a sha256 per file (``digests``; on a shared_fs the master computes its own when it
publishes the files), and ``restore_path`` / ``download`` check the files against what the master
recorded before handing them over: a file changed, removed or added after the report raises
``CheckpointChanged`` naming it.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from controlplane.core._distributed import DistributedContext
from controlplane.core._info import ClusterInfo
from controlplane.core._metrics import utc_now
from controlplane.core._session import MasterError, Session
from controlplane.core.storage import StorageManager
from controlplane.storage import LocalDirectoryStorage
from controlplane.storage.base import directory_resources
from controlplane.storage.digests import file_digests, verify

log = logging.getLogger("controlplane.core")
METADATA_FILE = "metadata.json"
_SHARD_STAGING = ".tmp-shards"  # list_checkpoints() skips names with ".tmp-"


def _check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    metadata = dict(metadata or {})
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ValueError("checkpoint metadata must contain an integer 'steps_completed'")
    json.dumps(metadata)  # a TypeError here names the value that cannot be stored
    return metadata


def merge_metadata(all_metadata: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Every worker's metadata as one dict: nested dicts merge, equal values agree; a key given
    different values is a conflict ({"/a/b": [ranks]})."""
    merged: dict[str, Any] = {}
    owners: dict[str, list[int]] = {}
    conflicts: dict[str, list[int]] = {}

    def merge(into: dict[str, Any], new: dict[str, Any], rank: int, prefix: str) -> None:
        for key, value in new.items():
            path = f"{prefix}/{key}"
            owners.setdefault(path, []).append(rank)
            if key not in into:
                into[key] = json.loads(json.dumps(value)) if isinstance(value, dict) else value
            elif isinstance(into[key], dict) and isinstance(value, dict):
                merge(into[key], value, rank, path)
            elif into[key] != value:
                conflicts[path] = owners[path]

    for rank, md in enumerate(all_metadata):
        merge(merged, md or {}, rank, "")
    return merged, conflicts


def _conflict_error(kind: str, conflicts: dict[str, list[int]]) -> RuntimeError:
    lines = "\n".join(f"    {name} given by ranks {ranks}" for name, ranks in sorted(conflicts.items()))
    return RuntimeError(f"refusing to store a sharded checkpoint with {kind} conflicts:\n{lines}")


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class DownloadMode(enum.Enum):
    """Accepted for compatibility with Determined; every worker reads the checkpoint itself."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    def __init__(self, storage: StorageManager, session: Session | None, info: ClusterInfo | None,
                 before_report: Callable[[], None] = lambda: None, storage_id: Any = None,
                 dist: DistributedContext | None = None) -> None:
        self._storage = storage
        self._session = session
        self._info = info
        self._before_report = before_report
        self._storage_id = storage_id
        self._dist = dist if dist is not None else DistributedContext()

    def _chief_only(self, what: str) -> None:
        if self._dist.rank != 0:
            raise RuntimeError(f"cannot call CheckpointContext.{what}(shard=False) from non-chief worker "
                               f"(rank={self._dist.rank}); use shard=True on every worker, or call it on the chief")

    def store_path(self, metadata: dict[str, Any] | None = None, *,
                   shard: bool = False) -> contextlib.AbstractContextManager[tuple[Path, str]]:
        """Yields ``(path, uuid)``; files written to ``path`` become the checkpoint on a clean exit.
        ``shard=True``: every worker calls it together and writes its own part (module docstring)."""
        if shard and self._dist.size > 1:
            return self._store_path_sharded(metadata)
        self._chief_only("store_path")
        return self._store_path_single(metadata)

    @contextlib.contextmanager
    def _store_path_single(self, metadata: dict[str, Any] | None) -> Iterator[tuple[Path, str]]:
        metadata = _check_metadata(metadata)
        ckpt_uuid = str(uuidlib.uuid4())
        self._announce(ckpt_uuid, metadata)
        with self._storage.store_path(ckpt_uuid) as path:
            yield path, ckpt_uuid
            (path / METADATA_FILE).write_text(json.dumps(metadata))
            digests = self._digests(path)
        self._report(ckpt_uuid, metadata, digests)

    def upload(self, ckpt_dir: str | Path | None, metadata: dict[str, Any] | None = None, *,
               shard: bool = False) -> str:
        """Copies a finished directory into storage as a new checkpoint; returns its uuid. With
        ``shard=True`` every worker calls it; a worker with nothing to store passes ``None``."""
        if shard and self._dist.size > 1:
            return self._upload_sharded(ckpt_dir, metadata)
        self._chief_only("upload")
        if ckpt_dir is None:
            raise RuntimeError("cannot call .upload(ckpt_dir=None, shard=False), which would store nothing")
        metadata = _check_metadata(metadata)
        src = Path(ckpt_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"checkpoint directory {src} does not exist")
        ckpt_uuid = str(uuidlib.uuid4())
        self._announce(ckpt_uuid, metadata)
        with self._storage.store_path(ckpt_uuid) as path:
            shutil.copytree(src, path, dirs_exist_ok=True)  # staged like store_path: any backend
            (path / METADATA_FILE).write_text(json.dumps(metadata))
            digests = self._digests(path)
        self._report(ckpt_uuid, metadata, digests)
        return ckpt_uuid

    # ---- sharded: every worker together ------------------------------------------------------
    @contextlib.contextmanager
    def _store_path_sharded(self, metadata: dict[str, Any] | None) -> Iterator[tuple[Path, str]]:
        dist = self._dist
        ckpt_uuid = dist.broadcast(str(uuidlib.uuid4()) if dist.rank == 0 else None)
        merged = self._merged_metadata(metadata)
        if dist.rank == 0:
            self._announce(ckpt_uuid, merged)
        staging = Path(tempfile.mkdtemp(prefix=f"ckpt-{ckpt_uuid[:8]}-rank{dist.rank}-"))
        try:
            failure: BaseException | None = None
            try:
                yield staging, ckpt_uuid
            except BaseException as e:  # noqa: BLE001 - raised again by _finish_sharded, once the others heard of it
                failure = e
            self._finish_sharded(ckpt_uuid, staging, merged, failure)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _upload_sharded(self, ckpt_dir: str | Path | None, metadata: dict[str, Any] | None) -> str:
        dist = self._dist
        ckpt_uuid = dist.broadcast(str(uuidlib.uuid4()) if dist.rank == 0 else None)
        merged = self._merged_metadata(metadata)
        src = Path(ckpt_dir) if ckpt_dir is not None else None
        failure: BaseException | None = None
        if src is not None and not src.is_dir():
            failure = FileNotFoundError(f"checkpoint directory {src} does not exist")
        # Workers of one machine that pass the same directory store it once (the lowest rank).
        uid = None
        if src is not None and failure is None:
            st = os.stat(src)
            uid = (os.uname().nodename, st.st_dev, st.st_ino)
        uids = dist.allgather(uid)
        if not any(u is not None for u in uids) and failure is None:
            failure = RuntimeError("upload(ckpt_dir=None, shard=True) on every worker: nothing to store")
        if dist.rank == 0:
            self._announce(ckpt_uuid, merged)
        staging = Path(tempfile.mkdtemp(prefix=f"ckpt-{ckpt_uuid[:8]}-rank{dist.rank}-"))
        try:
            if failure is None and uid is not None and uids.index(uid) == dist.rank:
                assert src is not None
                shutil.copytree(src, staging, dirs_exist_ok=True)
            self._finish_sharded(ckpt_uuid, staging, merged, failure)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return ckpt_uuid

    def _merged_metadata(self, metadata: dict[str, Any] | None) -> dict[str, Any]:
        merged, conflicts = merge_metadata(self._dist.allgather(dict(metadata or {})))
        if conflicts:
            raise _conflict_error("metadata", conflicts)
        return _check_metadata(merged)

    def _finish_sharded(self, ckpt_uuid: str, staging: Path, merged: dict[str, Any],
                        failure: BaseException | None) -> None:
        """After every worker wrote into its ``staging``: dedupe, store, then the chief reports."""
        dist = self._dist
        mine = directory_resources(staging) if failure is None else {}
        mine.pop(METADATA_FILE, None)  # the merged metadata is the one stored
        (staging / METADATA_FILE).unlink(missing_ok=True)
        statuses = dist.allgather(None if failure is None else f"{type(failure).__name__}: {failure}")
        self._raise_if_failed(statuses, failure, "while writing its part")
        # Files more than one worker wrote: the same bytes are stored once, different bytes refused.
        all_files = dist.allgather(sorted(mine))
        writers: dict[str, list[int]] = {}
        for rank, names in enumerate(all_files):
            for name in names:
                writers.setdefault(name, []).append(rank)
        shared = sorted(n for n, ranks in writers.items() if len(ranks) > 1)
        digests = dist.allgather({n: _md5(staging / n) for n in shared if n in mine})
        conflicts = {n: writers[n] for n in shared if len({d[n] for d in digests if n in d}) > 1}
        if conflicts:
            raise _conflict_error("file", conflicts)
        for name in shared:
            if min(writers[name]) != dist.rank and name in mine:
                (staging / name).unlink()
        if dist.rank == 0:
            (staging / METADATA_FILE).write_text(json.dumps(merged))
        sha256s: dict[str, str] | None = {}
        for part in dist.allgather(self._digests(staging)):  # every file is stored by one worker
            sha256s = None if part is None or sha256s is None else {**sha256s, **part}
        error: BaseException | None = None
        try:
            self._store_shard(staging, ckpt_uuid)
        except BaseException as e:  # noqa: BLE001 - reported to every worker below
            error = e
        statuses = dist.allgather(None if error is None else f"{type(error).__name__}: {error}")
        if dist.rank == 0 and any(statuses):
            self._discard_sharded(ckpt_uuid)
        self._raise_if_failed(statuses, error, "while storing its part")
        if isinstance(self._storage, LocalDirectoryStorage):
            if dist.rank == 0:  # every part is in the shared staging directory: publish it at once
                os.replace(self._shard_dir(ckpt_uuid), self._storage.base / ckpt_uuid)
            dist.allgather(None)  # nobody reads the checkpoint before it is in place
        if dist.rank == 0:
            self._report(ckpt_uuid, merged, sha256s)

    def _raise_if_failed(self, statuses: list[Any], own: BaseException | None, when: str) -> None:
        if own is not None:
            raise own
        failed = {rank: msg for rank, msg in enumerate(statuses) if msg}
        if failed:
            detail = "; ".join(f"rank {r}: {m}" for r, m in sorted(failed.items()))
            raise RuntimeError(f"sharded checkpoint not stored: a worker failed {when} ({detail})")

    def _shard_dir(self, ckpt_uuid: str) -> Path:
        assert isinstance(self._storage, LocalDirectoryStorage)
        return self._storage.base / f"{ckpt_uuid}{_SHARD_STAGING}"

    def _store_shard(self, staging: Path, ckpt_uuid: str) -> None:
        """This worker's files under ``ckpt_uuid``. On a shared file system every part goes into one
        staging directory that the chief renames into place; a cloud store takes the keys directly."""
        if isinstance(self._storage, LocalDirectoryStorage):
            target = self._shard_dir(ckpt_uuid)
            target.mkdir(parents=True, exist_ok=True)
            shutil.copytree(staging, target, dirs_exist_ok=True)
        elif any(staging.iterdir()):
            self._storage.upload_dir(staging, ckpt_uuid)

    def _discard_sharded(self, ckpt_uuid: str) -> None:
        try:
            if isinstance(self._storage, LocalDirectoryStorage):
                shutil.rmtree(self._shard_dir(ckpt_uuid), ignore_errors=True)
            self._storage.delete(ckpt_uuid)
        except Exception:  # best effort; GC removes an announced checkpoint's files
            log.exception("removing the parts of failed sharded checkpoint %s", ckpt_uuid)

    def download(self, storage_id: str, ckpt_dir: str | Path, download_mode: DownloadMode | None = None) -> None:
        """The checkpoint's files into ``ckpt_dir``; raises CheckpointChanged naming a file that is
        not what was reported (the master's sha256 per file), before anything loads it."""
        expected = self._expected_digests(storage_id)
        dst = Path(ckpt_dir)
        had_files = dst.is_dir() and any(dst.iterdir())
        self._storage.download(storage_id, dst)
        verify(dst, expected, storage_id, others_ok=had_files)

    @contextlib.contextmanager
    def restore_path(self, storage_id: str, download_mode: DownloadMode | None = None) -> Iterator[Path]:
        """A local directory with the checkpoint's files, checked against the sha256 per file the
        master recorded with the report (CheckpointChanged names a changed, missing or added file).
        Each worker reads on its own here (any ``download_mode``), so workers need not call it in step."""
        expected = self._expected_digests(storage_id)
        with self._storage.restore_path(storage_id) as path:
            verify(path, expected, storage_id)
            yield path

    def _expected_digests(self, storage_id: str) -> dict[str, str] | None:
        """The sha256 per file the master recorded for the checkpoint; None off the cluster, for a
        checkpoint it does not know, or one reported without them."""
        if self._session is None:
            return None
        try:
            found = self._session.get(f"/api/v1/checkpoints/{storage_id}").json()["checkpoint"].get("digests")
        except MasterError as e:
            if e.status != 404:
                raise
            return None
        return found if isinstance(found, dict) else None

    def _digests(self, path: Path) -> dict[str, str] | None:
        """What a report carries: the sha256 of every file, computed before they are uploaded (the
        master computes a shared_fs checkpoint's itself). None off the cluster: nothing is reported."""
        return file_digests(path) if self._session is not None and self._info is not None else None

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The master's record on the cluster (GET /api/v1/checkpoints/{uuid}); else metadata.json."""
        if self._session is not None:
            try:
                return self._session.get(f"/api/v1/checkpoints/{storage_id}").json()["checkpoint"]["metadata"]
            except MasterError as e:
                if e.status != 404:
                    raise
        with self._storage.restore_path(storage_id) as path:
            return json.loads((path / METADATA_FILE).read_text())

    def delete(self, storage_id: str) -> None:
        """Removes the files, then tells the master (a master without that endpoint is tolerated)."""
        self._storage.delete(storage_id)
        if self._session is None:
            return
        try:
            self._session.patch("/api/v1/checkpoints", json={
                "checkpoints": [{"uuid": storage_id, "resources": {"resources": {}}}]})
        except MasterError as e:
            if e.status not in (404, 405):
                raise
            log.info("master does not record checkpoint deletion (%s)", e.status)

    def _announce(self, ckpt_uuid: str, metadata: dict[str, Any]) -> None:
        """Tell the master an upload is starting (STATE_ACTIVE), so that files a killed trial leaves
        in storage always have a row, which garbage collection removes when the experiment ends."""
        if self._session is not None and self._info is not None:
            self._post(ckpt_uuid, metadata, "STATE_ACTIVE", {})

    def _report(self, ckpt_uuid: str, metadata: dict[str, Any], digests: dict[str, str] | None = None) -> None:
        if self._session is None or self._info is None:
            print(f"[checkpoint] {ckpt_uuid} steps_completed={metadata['steps_completed']}", flush=True)
            return
        self._before_report()  # the metrics of this step land before the checkpoint that follows them
        self._post(ckpt_uuid, metadata, "STATE_COMPLETED",
                   {k: str(v) for k, v in self._storage.resources(ckpt_uuid).items()}, digests)

    def _post(self, ckpt_uuid: str, metadata: dict[str, Any], state: str, resources: dict[str, str],
              digests: dict[str, str] | None = None) -> None:
        assert self._session is not None and self._info is not None  # callers post only on the cluster
        trial = self._info.trial
        self._session.post("/api/v1/checkpoints", json={
            "uuid": ckpt_uuid, "taskId": self._info.task_id, "allocationId": self._info.allocation_id,
            "reportTime": utc_now(), "state": state, "resources": resources,
            "metadata": metadata,
            "training": {"trialId": trial.trial_id, "experimentId": trial.experiment_id} if trial else {},
            "storageId": self._storage_id,
            **({"digests": digests} if digests is not None else {}),
        })
