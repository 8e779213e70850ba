"""The EC2 error table: every code the autoscaler's failover depends on maps to one class.

Synthetic ClientErrors cover the table; one test injects real EC2 error XML through botocore's
before-send hook against moto, since moto itself never returns capacity or quota errors.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from provisioners.base import (
    Fatal,
    InvalidConfig,
    NoCapacity,
    ProvisionerError,
    QuotaExceeded,
    Transient,
)
from provisioners.ec2_errors import map_error, translated


def client_error(code: str, status: int = 400, message: str | None = None) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message or f"msg for {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RunInstances",
    )


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("InsufficientInstanceCapacity", 500, NoCapacity),
        ("InsufficientCapacity", 500, NoCapacity),
        ("SpotMaxPriceTooLow", 400, NoCapacity),
        ("MaxSpotInstanceCountExceeded", 400, NoCapacity),
        ("InstanceLimitExceeded", 400, QuotaExceeded),
        ("VcpuLimitExceeded", 400, QuotaExceeded),
        ("RequestLimitExceeded", 503, Transient),
        ("Throttling", 400, Transient),
        ("InternalError", 500, Transient),
        ("Unavailable", 503, Transient),
        ("InvalidAMIID.NotFound", 400, InvalidConfig),
        ("InvalidAMIID.Malformed", 400, InvalidConfig),
        ("InvalidParameterValue", 400, InvalidConfig),
        ("InvalidSubnetID.NotFound", 400, InvalidConfig),
        ("Unsupported", 400, InvalidConfig),
        ("UnauthorizedOperation", 403, Fatal),
        ("AuthFailure", 401, Fatal),
        ("OptInRequired", 401, Fatal),
        ("SomethingNew", 503, Transient),
        ("SomethingNew", 403, Fatal),
        ("SomethingNew", 400, InvalidConfig),
    ],
)
def test_client_error_codes(code: str, status: int, cls: type[ProvisionerError]) -> None:
    err = map_error(client_error(code, status, "the provider said so"), zone="z1", instance_type="g5.xlarge")
    assert type(err) is cls
    assert err.provider_message == "the provider said so"
    assert err.code == code and err.zone == "z1" and err.instance_type == "g5.xlarge"
    assert "the provider said so" in str(err) and cls.kind in str(err)


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (EndpointConnectionError(endpoint_url="http://x"), Transient),
        (ConnectTimeoutError(endpoint_url="http://x"), Transient),
        (ReadTimeoutError(endpoint_url="http://x"), Transient),
        (NoCredentialsError(), Fatal),
    ],
)
def test_non_client_errors(exc: Exception, cls: type[ProvisionerError]) -> None:
    assert type(map_error(exc)) is cls


def test_translated_keeps_cause_and_passes_taxonomy_through() -> None:
    original = client_error("VcpuLimitExceeded")
    with pytest.raises(QuotaExceeded) as e, translated(zone="z", instance_type="t"):
        raise original
    assert e.value.__cause__ is original and e.value.zone == "z"
    already = NoCapacity("x")
    with pytest.raises(NoCapacity) as e2, translated():
        raise already
    assert e2.value is already


def test_injected_capacity_error_through_real_botocore(moto_url: str) -> None:
    """moto never says "no capacity": answer RunInstances with EC2 error XML before it is sent."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from botocore.config import Config

    from provisioners.ec2 import Ec2Config, Ec2Provisioner
    from tests.support.moto_server import stock_image

    # One attempt: the hook answers every attempt alike, and botocore's retries of a 500 (with
    # backoff) would only add seconds before the same error is parsed.
    client = boto3.client("ec2", region_name="us-west-2", endpoint_url=moto_url,
                          config=Config(retries={"total_max_attempts": 1}))
    image = stock_image(client)
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
        b"<Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient "
        b"g5.xlarge capacity in the Availability Zone you requested (us-west-2b).</Message>"
        b"</Error></Errors><RequestID>r-1</RequestID></Response>"
    )

    class _Raw:
        def stream(self, **_: Any) -> Any:
            yield body

    def reply(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 500, {}, _Raw())

    client.meta.events.register("before-send.ec2.RunInstances", reply)
    prov = Ec2Provisioner(
        Ec2Config(region="us-west-2", instance_type="g5.xlarge", image_id=image, zones=["us-west-2b"]),
        client=client,
    )
    from provisioners.base import LaunchRequest

    with pytest.raises(NoCapacity) as e:
        prov.launch(LaunchRequest("r1", "c1", "gpu", 1, "g5.xlarge", "us-west-2b", False, ""))
    assert e.value.zone == "us-west-2b" and e.value.instance_type == "g5.xlarge"
    assert "sufficient g5.xlarge capacity" in e.value.provider_message
    assert e.value.code == "InsufficientInstanceCapacity"
