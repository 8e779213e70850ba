"""Determined's UI links (``/det/...``) reach this UI's page for the same thing."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("determined", "ours"), [
    ("/det", "/experiments"),
    ("/det/experiments/7/overview", "/experiments/7"),
    ("/det/experiments/7", "/experiments/7"),
    ("/det/experiments/7/trials/12/logs", "/trials/12"),
    ("/det/trials/7/12", "/trials/12"),
    ("/det/models/my%20model/versions/2", "/models/my%20model"),
    ("/det/clusters", "/cluster"),
    ("/det/jobs", "/jobs"),
    ("/det/projects/1/experiments", "/experiments"),
    ("/det//evil.example.com", "/experiments"),
])
async def test_determined_paths_redirect_to_our_pages(api, determined, ours):
    r = await api.get(determined, follow_redirects=False)
    assert r.status_code == 301, r.text
    assert r.headers["location"] == ours
