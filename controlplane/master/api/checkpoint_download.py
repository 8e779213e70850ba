"""`GET /checkpoints/{uuid}`: a checkpoint as a tar.gz stream, for clients that cannot reach its
storage (`det checkpoint download --mode master`, Determined's route outside /api/v1).

Users may download any checkpoint (VIEW); a task token only its own experiment's; only files the
checkpoint owns (``Checkpoint.owns_files``: published by the master, or uploaded by its trial). The files are
read from storage and checked against the sha256 recorded with the report before a byte is sent:
a changed, missing or added file is a 409 naming it."""

from __future__ import annotations

import asyncio
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from litestar import get
from litestar.background_tasks import BackgroundTask
from litestar.response import File

from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.params import CheckpointUuid
from controlplane.master.authz import Action, opt
from controlplane.master.checkpoint_gc import collect as gc
from controlplane.master.errors import ApiError, Conflict, NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.runtime_core import RuntimeCore
from controlplane.master.services import checkpoints as svc


class StorageFailed(ApiError):
    status = 502


def _pack(rt: RuntimeCore, storage_config: dict[str, Any], uuid: str, work: Path,
          digests: dict[str, Any] | None) -> Path:
    from controlplane.storage import CheckpointChanged, CheckpointNotFound, StorageError
    from controlplane.storage.digests import verify

    files = work / uuid
    try:
        gc.storage_of(rt, storage_config).download(uuid, files)
        verify(files, digests, uuid)
    except CheckpointChanged as e:
        raise Conflict(str(e)) from e
    except CheckpointNotFound as e:
        raise NotFound(f"checkpoint {uuid}: its files are not in storage ({e})") from e
    except StorageError as e:
        raise StorageFailed(f"checkpoint {uuid}: reading it from storage failed: {e}") from e
    archive = work / f"{uuid}.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:  # speed over size: weights compress poorly
        tar.add(files, arcname=".")
    shutil.rmtree(files, ignore_errors=True)
    return archive


@get("/checkpoints/{ckpt_uuid:str}", operation_id="DownloadCheckpoint", opt=opt(Action.VIEW, "body"),
     tags=["checkpoints"])
async def download(request: AnyRequest, ckpt_uuid: CheckpointUuid) -> File:
    rt = runtime_of(request)
    ckpt, _config, _ = await svc.get_checkpoint(rt, principal_of(request), ckpt_uuid)
    if ckpt.state in (gc.DELETED, gc.DELETING):
        raise NotFound(f"checkpoint {ckpt_uuid} was deleted ({ckpt.delete_reason or 'no reason recorded'})")
    if not ckpt.owns_files:  # whatever sits at its place was not published for it: never served
        raise NotFound(f"checkpoint {ckpt_uuid} has no files in storage (it was reported without any)")
    work = Path(tempfile.mkdtemp(prefix="det-ckpt-"))
    try:
        archive = await asyncio.to_thread(_pack, rt, ckpt.storage, ckpt_uuid, work, ckpt.digests)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return File(archive, filename=f"{ckpt_uuid}.tar.gz", media_type="application/gzip",
                background=BackgroundTask(shutil.rmtree, work, True))


ROUTES = [download]
