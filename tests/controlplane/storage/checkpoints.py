"""Checkpoint trees for the storage scenarios, and fingerprints to compare them by."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MiB = 1024 * 1024


def write_tree(root: Path) -> dict[str, bytes]:
    """Nested directories, an empty file, and a 20 MiB file (above the tests' 5 MiB part size)."""
    files = {
        "metadata.json": b'{"steps_completed": 3}',
        "model/weights.bin": os.urandom(20 * MiB + 12345),
        "model/layers/0/bias.npy": os.urandom(1000),
        "optimizer/state.pt": os.urandom(300_000),
        "empty.txt": b"",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def tree(root: Path) -> dict[str, str]:
    """{relpath: sha256} of every file under root."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
