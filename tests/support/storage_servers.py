"""Local object stores for tests and benchmarks: a moto S3 server and a gcp-storage-emulator.

Both listen on 127.0.0.1 on a free port and are stopped by whoever started them.

Context managers (usable anywhere, e.g. benchmarks):
    ``moto_s3_thread()`` moto in this process (ThreadedMotoServer), yields its URL;
    ``moto_s3_process()`` moto as a child process (keeps its memory out of ours), yields its URL;
    ``gcs_emulator_process()`` the emulator CLI as a child process, yields its URL.

pytest fixtures (import them into a conftest.py to use them in another test directory):
    ``moto_s3`` (session): URL of one in-process moto server;
    ``s3_bucket``: a fresh, empty bucket on it, as an ``S3Bucket`` (``.config`` is a
        ``checkpoint_storage`` dict for ``from_config``);
    ``gcs_emulator`` (session): URL of one emulator;
    ``gcs_bucket``: a fresh, empty bucket on it with STORAGE_EMULATOR_HOST set for the test, as a
        ``GCSBucket`` (``.config`` likewise).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.moto_server import moto_server_thread

BIN = Path(sys.executable).parent
# moto accepts any key pair unless IAM checks are switched on (see S3Bucket.enforce_auth).
S3_KEYS = {"access_key": "testing", "secret_key": "testing"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen[Any] | None, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode} before it was ready")
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server {url} was not ready after {timeout_s} s")


@contextlib.contextmanager
def _child(cmd: list[str], ready_url: str) -> Iterator[subprocess.Popen[Any]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_ready(ready_url, proc)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


moto_s3_thread = moto_server_thread  # S3 is one of the services it serves


@contextlib.contextmanager
def moto_s3_process() -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _child([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], f"{url}/moto-api/data.json"):
        yield url


@contextlib.contextmanager
def gcs_emulator_process() -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(BIN / "gcp-storage-emulator"), "start", "-H", "127.0.0.1", "--port", str(port), "--in-memory", "-q"]
    with _child(cmd, f"{url}/storage/v1/b"):
        yield url


@dataclass
class S3Bucket:
    """An empty bucket on moto; ``keys()`` lists through a plain boto3 client, not our code."""

    endpoint_url: str
    name: str
    config: dict[str, Any] = field(init=False)
    _client: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.config = {"type": "s3", "bucket": self.name, "endpoint_url": self.endpoint_url, **S3_KEYS}

    def client(self) -> Any:
        """One plain boto3 client per bucket (thread-safe): a new Session per look would parse
        botocore's S3 model again each time."""
        if self._client is None:
            import boto3

            self._client = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing").client(
                "s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        return self._client

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def multipart_uploads(self, prefix: str = "") -> list[str]:
        answer = self.client().list_multipart_uploads(Bucket=self.name, Prefix=prefix)
        return [u["Key"] for u in answer.get("Uploads", [])]

    @contextlib.contextmanager
    def enforce_auth(self) -> Iterator[None]:
        """moto checks signatures and IAM while inside: unknown access keys get a real 403."""
        requests.post(f"{self.endpoint_url}/moto-api/reset-auth", data=b"0", timeout=10).raise_for_status()
        try:
            yield
        finally:
            requests.post(f"{self.endpoint_url}/moto-api/reset-auth", data=b"inf", timeout=10).raise_for_status()


@dataclass
class GCSBucket:
    """An empty bucket on the emulator; ``keys()`` lists through a plain client, not our code."""

    emulator_url: str
    name: str
    config: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.config = {"type": "gcs", "bucket": self.name}

    def client(self) -> Any:
        import google.cloud.storage as storage
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.emulator_url})

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(b.name for b in self.client().list_blobs(self.name, prefix=prefix))


def unique_bucket(stem: str = "ckpt") -> str:
    return f"{stem}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[str]:
    with moto_s3_thread() as url:
        yield url


@pytest.fixture
def s3_bucket(moto_s3: str) -> Iterator[S3Bucket]:
    bucket = S3Bucket(moto_s3, unique_bucket())
    bucket.client().create_bucket(Bucket=bucket.name)
    yield bucket
    requests.post(f"{moto_s3}/moto-api/reset", timeout=10).raise_for_status()  # frees moto's memory


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    with gcs_emulator_process() as url:
        yield url


@pytest.fixture
def gcs_bucket(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[GCSBucket]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = GCSBucket(gcs_emulator, unique_bucket())
    bucket.client().create_bucket(bucket.name)
    yield bucket
    requests.get(f"{gcs_emulator}/wipe", timeout=10).raise_for_status()  # frees the emulator's memory
