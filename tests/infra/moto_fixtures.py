"""moto on loopback for the infra tests (preflight, `down`'s cleanup); tests/infra/conftest.py
registers these fixtures.

One server per test process (its first EC2 call costs seconds), reset before every test; the AWS
variables point boto3 at it with dummy credentials moto accepts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.moto_server import aws_env, fresh_moto, moto_server_thread

REGION = "us-east-1"
AWS_ENV = aws_env(REGION)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    with moto_server_thread() as url:
        yield url


@pytest.fixture
def moto_url(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    fresh_moto(moto_server, monkeypatch, REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    for k in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    return moto_server


@pytest.fixture
def session(moto_url: str):  # a boto3 Session whose clients reach moto
    import boto3

    return boto3.session.Session(region_name=REGION)
