"""The context cache stays within its bounds, dropping the least recently used archive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_image.agent import context_cache
from agent_image.agent.context_cache import ContextCache


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []

    def fake_download(master_url: str, task_id: str, session_token: str, timeout: float = 120.0) -> bytes:
        seen.append(task_id)
        return task_id.encode() * 100

    monkeypatch.setattr(context_cache, "download_context", fake_download)
    return seen


def _age(cache: ContextCache, name: str, mtime: float) -> None:
    os.utime(cache.directory / f"{name}.tgz", (mtime, mtime))


def test_entries_bound_evicts_the_least_recently_used(tmp_path: Path, downloads: list[str]) -> None:
    cache = ContextCache(tmp_path / "contexts", max_entries=2)
    cache.get("http://m", "a", "t", "a")
    cache.get("http://m", "b", "t", "b")
    _age(cache, "a", 1000)
    _age(cache, "b", 2000)
    assert cache.get("http://m", "a", "t", "a") == b"a" * 100  # a hit makes "a" the most recent
    cache.get("http://m", "c", "t", "c")
    assert sorted(p.name for p in cache.directory.iterdir()) == ["a.tgz", "c.tgz"]
    assert downloads == ["a", "b", "c"]
    cache.get("http://m", "b", "t", "b")  # evicted: downloaded again
    assert downloads == ["a", "b", "c", "b"]


def test_bytes_bound_keeps_the_archive_just_stored(tmp_path: Path, downloads: list[str]) -> None:
    cache = ContextCache(tmp_path / "contexts", max_bytes=150)
    cache.get("http://m", "a", "t", "a")
    _age(cache, "a", 1000)
    cache.get("http://m", "b", "t", "b")
    assert [p.name for p in cache.directory.iterdir()] == ["b.tgz"]
    cache.get("http://m", "bigger-than-the-bound", "t", "big")  # alone over the bound: still kept for its task
    assert [p.name for p in cache.directory.iterdir()] == ["big.tgz"]
