"""The model definition: a list of v1File entries in, a tar.gz out (reference §2.2).

Entries that would escape the context (absolute paths, '..', links) are refused: the agent
unpacks this archive, so what goes in must stay inside its directory.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import posixpath
import tarfile
from typing import Any

from controlplane.master.errors import BadRequest, PayloadTooLarge

MAX_CONTEXT_BYTES = 96 * 1024 * 1024 - 1024 * 1024  # the Determined client's own limit
FILE, DIRECTORY = 48, 53


def _safe_path(path: Any, index: int) -> str:
    if not isinstance(path, str) or not path:
        raise BadRequest(f"modelDefinition[{index}].path: must be a non-empty string")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise BadRequest(f"modelDefinition[{index}].path: {path!r} escapes the context (absolute path)")
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../") or ".." in path.split("/"):
        raise BadRequest(f"modelDefinition[{index}].path: {path!r} escapes the context ('..')")
    return norm


def build_archive(entries: Any) -> tuple[bytes, str]:
    """Returns (tar.gz bytes, sha256 hex). Raises BadRequest/PayloadTooLarge naming the entry."""
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise BadRequest("modelDefinition: must be a list of files")
    buf = io.BytesIO()
    total = 0
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise BadRequest(f"modelDefinition[{i}]: must be an object")
            path = _safe_path(entry.get("path"), i)
            if path in seen:
                raise BadRequest(f"modelDefinition[{i}].path: {path!r} appears twice")
            seen.add(path)
            kind = entry.get("type", FILE)
            info = tarfile.TarInfo(path)
            mode = entry.get("mode", 0o100644)
            info.mode = (int(mode) & 0o7777) if isinstance(mode, (int, str)) and str(mode).isdigit() else 0o644
            try:
                info.mtime = int(entry.get("mtime") or 0)
            except (TypeError, ValueError):
                info.mtime = 0
            if kind == DIRECTORY:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == FILE:
                try:
                    data = base64.b64decode(entry.get("content") or "", validate=True)
                except (binascii.Error, ValueError) as e:
                    raise BadRequest(f"modelDefinition[{i}].content: not valid base64 ({path})") from e
                total += len(data)
                if total > MAX_CONTEXT_BYTES:
                    raise PayloadTooLarge(
                        f"modelDefinition: the context is larger than {MAX_CONTEXT_BYTES} bytes")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                raise BadRequest(f"modelDefinition[{i}].type: {path!r} is of type {kind!r}; only regular "
                                 "files (48) and directories (53) are allowed (links could point out of the context)")
    blob = buf.getvalue()
    return blob, hashlib.sha256(blob).hexdigest()
