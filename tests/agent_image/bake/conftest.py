"""moto (EC2, server mode, on loopback) and the stand-in builder for the bake's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_image.bake.common import Timeouts
from tests.agent_image.bake.builder_rig import BuilderSshServer
from tests.support.moto_server import aws_env, fresh_moto, moto_server_thread, stock_image

REGION = "us-west-2"
AWS_ENV = aws_env(REGION)
# moto's instances run, stop and terminate at once; nothing here waits on a clock.
FAST = Timeouts(ssh_deadline_s=10, ssh_retry_s=0.2, host_key_wait_s=0, poll_s=1, instance_wait_s=10,
                image_wait_s=10)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    with moto_server_thread() as url:
        yield url


@pytest.fixture
def moto_url(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return fresh_moto(moto_server, monkeypatch, REGION)


@pytest.fixture
def ec2(moto_url: str) -> Any:
    import boto3

    # boto3's default session: a new Session would parse botocore's EC2 model again for every test.
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)


@pytest.fixture
def base_image(ec2: Any) -> str:
    """One of moto's stock AMIs."""
    return stock_image(ec2)


@pytest.fixture
def builder(tmp_path: Path) -> Iterator[BuilderSshServer]:
    with BuilderSshServer(tmp_path) as server:
        yield server
