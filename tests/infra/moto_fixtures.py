"""moto on loopback for the infra tests (preflight, `down`'s cleanup): import the fixtures you use.

One server per module (its first EC2 call costs seconds), reset before every test; the AWS
variables point boto3 at it with dummy credentials moto accepts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.support.moto_server import moto_server_thread

REGION = "us-east-1"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SECURITY_TOKEN": "testing",
           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    with moto_server_thread() as url:
        yield url


@pytest.fixture
def moto_url(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    for k in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    requests.post(f"{moto_server}/moto-api/reset", timeout=10).raise_for_status()
    return moto_server


@pytest.fixture
def session(moto_url: str):  # noqa: ANN201 - a boto3 Session whose clients reach moto
    import boto3

    return boto3.session.Session(region_name=REGION)
