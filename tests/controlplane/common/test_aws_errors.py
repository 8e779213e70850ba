"""Every AWS user reads botocore's failures through one parser: what AWS said, or what failed here."""

from __future__ import annotations

from botocore import exceptions as bx
from s3transfer.exceptions import RetriesExceededError

from controlplane.common.aws_errors import describe, parse


def client_error(code: str, message: str, status: int) -> bx.ClientError:
    return bx.ClientError({"Error": {"Code": code, "Message": message},
                           "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")


def test_an_answer_from_aws_keeps_its_code_message_and_status():
    failure = parse(client_error("InsufficientInstanceCapacity", "No capacity in us-east-1a.", 500))
    assert failure is not None
    assert (failure.kind, failure.code, failure.message, failure.status) == (
        "api", "InsufficientInstanceCapacity", "No capacity in us-east-1a.", 500)
    assert describe(client_error("AuthFailure", "Bad token.", 401)) == "Bad token. (AuthFailure)"


def test_failures_on_this_side_say_which_kind_they_are():
    assert parse(bx.NoCredentialsError()).kind == "credentials"
    assert parse(bx.NoRegionError()).kind == "request"
    assert parse(bx.EndpointConnectionError(endpoint_url="http://127.0.0.1:9")).kind == "unreachable"
    assert parse(RetriesExceededError(last_exception=OSError("reset"))).kind == "unreachable"
    assert parse(bx.DataNotFoundError(data_path="x")).kind == "sdk"


def test_what_is_not_the_sdks_is_left_to_the_caller():
    assert parse(FileNotFoundError("/tmp/ckpt/state.pt")) is None
    assert parse(ValueError("a bug")) is None
