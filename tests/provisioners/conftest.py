"""Fixtures for provisioner tests: a moto EC2 server on loopback, reset before every test.

moto runs in server mode (not the in-process mock) so the real boto3 HTTP path, including
endpoint_url handling, is exercised exactly as the master will use it against moto.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.moto_server import aws_env, fresh_moto, moto_server_thread

REGION = "us-west-2"
_AWS_ENV = aws_env(REGION)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """One moto server per session (its first EC2 call costs seconds); yields its URL."""
    saved = {k: os.environ.get(k) for k in _AWS_ENV}
    os.environ.update(_AWS_ENV)
    try:
        with moto_server_thread() as url:
            yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def moto_url(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A clean moto state and fake credentials for one test."""
    return fresh_moto(moto_server, monkeypatch, REGION)
