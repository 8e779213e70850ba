"""moto in server mode on loopback, in this process: the one way every test starts it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def moto_server_thread() -> Iterator[str]:
    """A ThreadedMotoServer on 127.0.0.1 and a free port (EC2, S3, ...); yields its URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


# The first of moto's stock AMIs (owner "amazon", in every region): what these tests launch from.
STOCK_IMAGE_NAME = "Windows_Server-2016-English-Nano-Base-2017.10.13"


def stock_image(ec2: Any) -> str:
    """The id of one of moto's stock AMIs, looked up by name through `ec2` (a boto3 EC2 client).

    Asking for one by name costs milliseconds; listing them all (`Owners=["amazon"]`, ~1300 images)
    costs moto and botocore about a second of CPU per call, several on a loaded machine."""
    images = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": [STOCK_IMAGE_NAME]}])["Images"]
    assert len(images) == 1, f"moto has no single stock AMI named {STOCK_IMAGE_NAME!r}: {images}"
    return str(images[0]["ImageId"])


def aws_env(region: str) -> dict[str, str]:
    """Dummy credentials (moto only needs them present) and a default region, for boto3 and the
    processes a test starts."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SECURITY_TOKEN": "testing",
            "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": region}


def fresh_moto(url: str, monkeypatch: Any, region: str) -> str:
    """One test's moto: its state wiped and `aws_env(region)` set (undone with `monkeypatch`)."""
    import requests

    for k, v in aws_env(region).items():
        monkeypatch.setenv(k, v)
    requests.post(f"{url}/moto-api/reset", timeout=10).raise_for_status()
    return url
