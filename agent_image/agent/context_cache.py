"""Model-definition download with an on-disk cache keyed by ``StartTask.context_hash``.

A warm agent that already holds ``<work-dir>/contexts/<hash>.tgz`` does not download again.
The download uses the allocation's session token, like ``prep_container``. The cache is bounded
in bytes and entries: after each store the least recently used archives (by mtime, which a hit
refreshes) go until it fits, never the one just stored.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

import requests

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ContextError(RuntimeError):
    """The context could not be downloaded or decoded."""


def cache_file_name(context_hash: str) -> str:
    if _SAFE_NAME.match(context_hash) and context_hash not in (".", ".."):
        return f"{context_hash}.tgz"
    return hashlib.sha256(context_hash.encode()).hexdigest() + ".tgz"


def download_context(master_url: str, task_id: str, session_token: str, timeout: float = 120.0) -> bytes:
    url = f"{master_url.rstrip('/')}/api/v1/tasks/{task_id}/context_directory"
    headers = {"Grpc-Metadata-x-allocation-token": f"Bearer {session_token}"}
    try:
        resp = requests.get(url, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        raise ContextError(f"context download failed: {exc}") from exc
    if resp.status_code != 200:
        raise ContextError(f"context download failed: HTTP {resp.status_code}")
    try:
        b64 = resp.json().get("b64Tgz") or ""
        return base64.b64decode(b64) if b64 else b""
    except (ValueError, AttributeError) as exc:
        raise ContextError(f"bad context response: {exc}") from exc


DEFAULT_MAX_BYTES = 2 << 30
DEFAULT_MAX_ENTRIES = 64


class ContextCache:
    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_entries = max_entries

    def get(self, master_url: str, task_id: str, session_token: str, context_hash: str) -> bytes:
        """The context tarball bytes, from the cache when ``context_hash`` is known there."""
        path = self.directory / cache_file_name(context_hash) if context_hash else None
        if path is not None and path.is_file():
            log.info("context %s: cache hit", context_hash)
            data = path.read_bytes()
            with contextlib.suppress(OSError):
                os.utime(path)  # most recently used
            return data
        data = download_context(master_url, task_id, session_token)
        if path is not None:
            self._store(path, data)
        return data

    def _store(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".ctx-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            self._evict(keep=path)
        except OSError:
            log.warning("could not cache context %s", path.name, exc_info=True)
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _evict(self, keep: Path) -> None:
        """Drop the least recently used archives until the cache fits its bounds."""
        entries = []
        for p in self.directory.glob("*.tgz"):
            with contextlib.suppress(OSError):
                st = p.stat()
                entries.append((st.st_mtime, st.st_size, p))
        entries.sort(key=lambda e: e[0])
        total = sum(size for _, size, _ in entries)
        count = len(entries)
        for _, size, p in entries:
            if total <= self.max_bytes and count <= self.max_entries:
                break
            if p == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                log.info("context cache: evicted %s", p.name)
            total -= size
            count -= 1
