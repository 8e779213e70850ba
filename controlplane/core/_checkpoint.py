"""ctx.checkpoint: write files to storage, then report them; the report is the commit point.

Mirrors determined.core.CheckpointContext: ``store_path(metadata)`` yields ``(path, uuid)``,
``upload``, ``download``, ``restore_path``, ``get_metadata``, ``delete``. A checkpoint is reported
only after every file is in place, and only after the metrics reported before it were
acknowledged (Determined can invert that order; the master here relies on it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from controlplane.core._info import ClusterInfo
from controlplane.core._metrics import utc_now
from controlplane.core._session import MasterError, Session
from controlplane.core.storage import StorageManager

log = logging.getLogger("controlplane.core")
METADATA_FILE = "metadata.json"


def _check_metadata(metadata: dict | None) -> dict:
    metadata = dict(metadata or {})
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ValueError("checkpoint metadata must contain an integer 'steps_completed'")
    json.dumps(metadata)  # a TypeError here names the value that cannot be stored
    return metadata


class CheckpointContext:
    def __init__(self, storage: StorageManager, session: Session | None, info: ClusterInfo | None,
                 before_report: Callable[[], None] = lambda: None, storage_id: Any = None) -> None:
        self._storage = storage
        self._session = session
        self._info = info
        self._before_report = before_report
        self._storage_id = storage_id

    @contextlib.contextmanager
    def store_path(self, metadata: dict, *, shard: bool = False) -> Iterator[tuple[Path, str]]:
        """Yields ``(path, uuid)``; files written to ``path`` become the checkpoint on a clean exit."""
        metadata = _check_metadata(metadata)
        ckpt_uuid = str(uuidlib.uuid4())
        self._announce(ckpt_uuid, metadata)
        with self._storage.store_path(ckpt_uuid) as path:
            yield path, ckpt_uuid
            (path / METADATA_FILE).write_text(json.dumps(metadata))
        self._report(ckpt_uuid, metadata)

    def upload(self, ckpt_dir: str | Path, metadata: dict, *, shard: bool = False) -> str:
        """Copies a finished directory into storage as a new checkpoint; returns its uuid."""
        metadata = _check_metadata(metadata)
        src = Path(ckpt_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"checkpoint directory {src} does not exist")
        ckpt_uuid = str(uuidlib.uuid4())
        self._announce(ckpt_uuid, metadata)
        with self._storage.store_path(ckpt_uuid) as path:
            shutil.copytree(src, path, dirs_exist_ok=True)  # staged like store_path: any backend
            (path / METADATA_FILE).write_text(json.dumps(metadata))
        self._report(ckpt_uuid, metadata)
        return ckpt_uuid

    def download(self, storage_id: str, ckpt_dir: str | Path) -> None:
        self._storage.download(storage_id, Path(ckpt_dir))

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        with self._storage.restore_path(storage_id) as path:
            yield path

    def get_metadata(self, storage_id: str) -> dict:
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

    def _announce(self, ckpt_uuid: str, metadata: dict) -> None:
        """Tell the master an upload is starting (STATE_ACTIVE), so that files a killed trial leaves
        in storage always have a row, which garbage collection removes when the experiment ends."""
        if self._session is not None and self._info is not None:
            self._post(ckpt_uuid, metadata, "STATE_ACTIVE", {})

    def _report(self, ckpt_uuid: str, metadata: dict) -> None:
        if self._session is None or self._info is None:
            print(f"[checkpoint] {ckpt_uuid} steps_completed={metadata['steps_completed']}", flush=True)
            return
        self._before_report()  # the metrics of this step land before the checkpoint that follows them
        self._post(ckpt_uuid, metadata, "STATE_COMPLETED",
                   {k: str(v) for k, v in self._storage.resources(ckpt_uuid).items()})

    def _post(self, ckpt_uuid: str, metadata: dict, state: str, resources: dict[str, str]) -> None:
        assert self._session is not None and self._info is not None  # callers post only on the cluster
        trial = self._info.trial
        self._session.post("/api/v1/checkpoints", json={
            "uuid": ckpt_uuid, "taskId": self._info.task_id, "allocationId": self._info.allocation_id,
            "reportTime": utc_now(), "state": state, "resources": resources,
            "metadata": metadata,
            "training": {"trialId": trial.trial_id, "experimentId": trial.experiment_id} if trial else {},
            "storageId": self._storage_id,
        })
