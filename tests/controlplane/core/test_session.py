"""The master client: URL rules of Determined, retries of transient failures, clear 4xx errors."""

from __future__ import annotations

import pytest

from controlplane.core._session import MasterError, Session, canonical_master_url


def test_canonical_master_url():
    assert canonical_master_url("localhost") == "http://localhost:8080"
    assert canonical_master_url("10.0.0.1:9000/") == "http://10.0.0.1:9000"
    assert canonical_master_url("https://m.example") == "https://m.example"


def test_5xx_is_retried_and_4xx_names_url_and_status(fake_master):
    session = Session(fake_master.url, "t")
    fake_master.fail["/api/v1/trials/1/progress"] = [500, 503]
    session.post("/api/v1/trials/1/progress", json={"progress": 0.5, "is_raw": True})
    assert len(fake_master.calls("POST", "/progress")) == 3
    fake_master.fail["/api/v1/trials/1/progress"] = [403]
    with pytest.raises(MasterError) as e:
        session.post("/api/v1/trials/1/progress", json={"progress": 0.5, "is_raw": True})
    assert e.value.status == 403 and not e.value.transient
    assert f"POST {fake_master.url}/api/v1/trials/1/progress failed with 403: injected failure" == str(e.value)
    session.close()


def test_unreachable_master_gives_up_after_max_wait():
    session = Session("http://127.0.0.1:9", "t", max_wait_s=0.5)
    with pytest.raises(MasterError, match="master unreachable") as e:
        session.get("/api/v1/me")
    assert e.value.status == 0 and e.value.transient
