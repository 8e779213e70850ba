"""Every Google Cloud user reads the clients' failures through one parser."""

from __future__ import annotations

import requests
from google.api_core import exceptions as gx
from google.auth import exceptions as ax

from controlplane.common.gcp_errors import is_not_found, message, parse


def test_an_answer_from_google_keeps_its_status_reasons_and_words():
    exc = gx.Forbidden("GET https://compute.googleapis.com/x: Quota 'GPUS' exceeded.",
                       errors=[{"reason": "quotaExceeded"}])
    failure = parse(exc)
    assert failure is not None
    assert (failure.kind, failure.status, failure.reasons) == ("api", 403, ("quotaExceeded",))
    assert failure.message == "Quota 'GPUS' exceeded." == message(exc)
    assert is_not_found(gx.NotFound("no such bucket")) and not is_not_found(exc)


def test_a_retry_that_ran_out_reports_its_last_cause():
    cause = gx.ServiceUnavailable("try later")
    assert parse(gx.RetryError("deadline", cause)).status == 503
    assert parse(gx.RetryError("deadline", None)).kind == "unreachable"


def test_failures_on_this_side_say_which_kind_they_are():
    assert parse(ax.DefaultCredentialsError("none found")).credentials_refused
    assert parse(gx.Unauthenticated("bad token")).credentials_refused
    assert parse(requests.ConnectionError("refused")).kind == "unreachable"
    assert parse(FileNotFoundError("/tmp/x")) is None
