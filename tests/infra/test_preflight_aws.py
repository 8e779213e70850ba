"""AWS preflight against moto in server mode: what `up` reports before creating anything.

moto answers STS and EC2's instance-type calls with realistic data, but its Service Quotas knows
only VPC quotas and it never rejects credentials, so "quota too low" and "bad credentials" are
injected with botocore `before-call` hooks on the session (the response boto3 would have parsed,
or the ClientError it would have raised).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from infra.options import AwsOptions
from infra.preflight.aws import check
from tests.infra.moto_fixtures import REGION

pytestmark = pytest.mark.timeout(120)


def opts(**kw: Any) -> AwsOptions:
    base: dict[str, Any] = {"cluster_id": "demo", "region": REGION, "inbound_cidr": "203.0.113.7/32"}
    return AwsOptions(**{**base, **kw})


def quotas(values: dict[str, float]):  # a before-call hook answering GetServiceQuota
    def hook(params: dict, **_: Any) -> Any:
        code = json.loads(params["body"])["QuotaCode"]
        return AWSResponse("http://quotas", 200, {}, None), {"Quota": {"QuotaCode": code,
                                                                       "Value": values.get(code, 10_000.0)}}

    return hook


def test_a_workable_request_passes_and_says_the_quota_could_not_be_read(session):
    # moto's Service Quotas has no EC2 quotas: a warning, not a failure or a crash.
    report = check(opts(), session)
    assert report.ok, report.failures
    assert any("L-DB2E81BA" in w and "not checked" in w for w in report.warnings), report.warnings


def test_a_quota_too_low_is_one_sentence_naming_the_flag_and_the_numbers(session):
    session.events.register("before-call.service-quotas.GetServiceQuota", quotas({"L-DB2E81BA": 8.0}))
    report = check(opts(gpu_agent_instance_types=("g4dn.xlarge",), max_dynamic_agents=5), session)
    assert len(report.failures) == 1, report.failures
    failure = report.failures[0]
    assert "on-demand vCPU quota for G and VT instances in us-east-1 is 8" in failure
    assert "5 agents of g4dn.xlarge (4 vCPUs each) need 20" in failure
    assert "--max-dynamic-agents" in failure and "L-DB2E81BA" in failure
    assert report.warnings == []


def test_spot_agents_are_checked_against_the_spot_quota(session):
    session.events.register("before-call.service-quotas.GetServiceQuota", quotas({"L-3819A6DF": 4.0}))
    report = check(opts(spot=True, max_dynamic_agents=2), session)
    assert [f for f in report.failures if "spot vCPU quota for G and VT" in f and "need 8" in f], report.failures


def test_the_master_counts_against_the_standard_quota(session):
    session.events.register("before-call.service-quotas.GetServiceQuota", quotas({"L-1216C47A": 1.0}))
    report = check(opts(master_instance_type="m5.xlarge", max_dynamic_agents=0), session)
    assert report.failures == ["The on-demand vCPU quota for Standard (A, C, D, H, I, M, R, T, Z) instances in "
                               "us-east-1 is 1, but the master (m5.xlarge, 4 vCPUs) need 4: lower "
                               "--max-dynamic-agents or ask AWS to raise quota L-1216C47A."]


def test_types_the_region_does_not_offer_are_all_reported_together(session):
    report = check(opts(master_instance_type="m9.nonesuch", gpu_agent_instance_types=("g4dn.xlarge", "p9.fake")),
                   session)
    assert "Instance type m9.nonesuch (--master-instance-type) is not offered in region us-east-1." \
        in report.failures
    assert "Instance type p9.fake (--gpu-agent-instance-type) is not offered in region us-east-1." \
        in report.failures


def test_rejected_credentials_stop_the_checks_with_the_providers_message(session):
    def reject(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "InvalidClientTokenId",
                                     "Message": "The security token included in the request is invalid."}},
                          "GetCallerIdentity")

    session.events.register("before-call.sts.GetCallerIdentity", reject)
    report = check(opts(), session)
    assert report.failures == ["AWS credentials: The security token included in the request is invalid. "
                               "(InvalidClientTokenId)."]


def test_no_credentials_at_all_is_said_plainly(moto_url, monkeypatch):
    import boto3

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    report = check(opts(), boto3.session.Session(region_name=REGION))
    assert report.failures == ["AWS credentials: Unable to locate credentials."]
