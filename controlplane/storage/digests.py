"""A sha256 per checkpoint file, recorded when the checkpoint is reported and checked before its
files are used: ``det checkpoint download``, the master's ``GET /checkpoints/{uuid}`` and the core
API's restore refuse a checkpoint whose file was changed, removed or added after the report,
naming the file (``CheckpointChanged``), so a planted file is never unpickled."""

from __future__ import annotations

import hashlib
from pathlib import Path

from controlplane.storage.base import local_files
from controlplane.storage.errors import CheckpointChanged

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digests(root: Path) -> dict[str, str]:
    """{posix relpath: sha256 hex} of every file under ``root``."""
    return {rel: sha256_file(p) for rel, p in sorted(local_files(root).items())}


def verify(root: Path, expected: dict[str, str] | None, ckpt_uuid: str, *, others_ok: bool = False) -> None:
    """Raises CheckpointChanged naming the first file under ``root`` that is not as reported:
    changed, missing, or not part of the checkpoint (unless ``others_ok``: a download into a
    directory that already held files). ``expected`` None (a checkpoint reported without digests,
    before they existed): nothing to check."""
    if expected is None:
        return
    found = local_files(root)
    for rel in sorted(set(expected) | (set() if others_ok else set(found))):
        if rel not in found:
            raise CheckpointChanged(f"checkpoint {ckpt_uuid}: file {rel!r} is missing (it was reported with the "
                                    "checkpoint); refusing it", rel)
        if rel not in expected:
            raise CheckpointChanged(f"checkpoint {ckpt_uuid}: file {rel!r} was added after the checkpoint was "
                                    "reported; refusing it", rel)
        if sha256_file(found[rel]) != expected[rel]:
            raise CheckpointChanged(f"checkpoint {ckpt_uuid}: file {rel!r} was changed after the checkpoint was "
                                    "reported (its sha256 differs from the recorded one); refusing it", rel)
