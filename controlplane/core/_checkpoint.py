"""ctx.checkpoint: write files to storage, then report them; the report is the commit point.

Mirrors determined.core.CheckpointContext: ``store_path(metadata)`` yields ``(path, uuid)``,
``upload``, ``download``, ``restore_path``, ``get_metadata``. A checkpoint is reported only
after every file is in place, and only after the metrics reported before it were shipped.
"""

from __future__ import annotations

import contextlib
import json
import uuid as uuidlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from controlplane.core._info import ClusterInfo
from controlplane.core._session import Session
from controlplane.core.storage import StorageManager

METADATA_FILE = "metadata.json"


def _check_metadata(metadata: dict | None) -> dict:
    metadata = dict(metadata or {})
    if not isinstance(metadata.get("steps_completed"), int):
        raise ValueError("checkpoint metadata must contain an integer 'steps_completed'")
    return metadata


class CheckpointContext:
    def __init__(self, storage: StorageManager, session: Session | None, info: ClusterInfo | None,
                 before_report: Callable[[], None] = lambda: None) -> None:
        self._storage = storage
        self._session = session
        self._info = info
        self._before_report = before_report

    @contextlib.contextmanager
    def store_path(self, metadata: dict) -> Iterator[tuple[Path, str]]:
        metadata = _check_metadata(metadata)
        ckpt_uuid = str(uuidlib.uuid4())
        with self._storage.store_path(ckpt_uuid) as path:
            yield path, ckpt_uuid
            (path / METADATA_FILE).write_text(json.dumps(metadata))
        self._report(ckpt_uuid, metadata)

    def upload(self, ckpt_dir: str | Path, metadata: dict) -> str:
        metadata = _check_metadata(metadata)
        ckpt_uuid = str(uuidlib.uuid4())
        with self._storage.store_path(ckpt_uuid) as path:
            import shutil

            shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
            (path / METADATA_FILE).write_text(json.dumps(metadata))
        self._report(ckpt_uuid, metadata)
        return ckpt_uuid

    def download(self, ckpt_uuid: str, ckpt_dir: str | Path) -> None:
        self._storage.download(ckpt_uuid, Path(ckpt_dir))

    @contextlib.contextmanager
    def restore_path(self, ckpt_uuid: str) -> Iterator[Path]:
        with self._storage.restore_path(ckpt_uuid) as path:
            yield path

    def get_metadata(self, ckpt_uuid: str) -> dict:
        if self._session is None:
            with self._storage.restore_path(ckpt_uuid) as path:
                return json.loads((path / METADATA_FILE).read_text())
        return self._session.get(f"/api/v1/checkpoints/{ckpt_uuid}").json()["checkpoint"]["metadata"]

    def _report(self, ckpt_uuid: str, metadata: dict) -> None:
        if self._session is None or self._info is None:
            print(f"[checkpoint] {ckpt_uuid} steps_completed={metadata['steps_completed']}", flush=True)
            return
        self._before_report()  # the metrics of this step land before the checkpoint that follows them
        trial = self._info.trial
        self._session.post("/api/v1/checkpoints", json={
            "uuid": ckpt_uuid, "taskId": self._info.task_id, "allocationId": self._info.allocation_id,
            "reportTime": datetime.now(timezone.utc).isoformat(), "state": "STATE_COMPLETED",
            "resources": {k: str(v) for k, v in self._storage.resources(ckpt_uuid).items()},
            "metadata": metadata,
            "training": {"trialId": trial.trial_id, "experimentId": trial.experiment_id} if trial else {},
            "storageId": None,
        })
