"""`det trial logs ID --rank N`: the CLI asks the master for that rank's lines only."""

from __future__ import annotations


def test_rank_becomes_the_rank_ids_filter(fake_master, det):
    r = det("trial", "logs", "10", "--rank", "3")
    assert r.rc == 0, r.err
    assert fake_master.calls("GET", "/api/v1/trials/10/logs")[-1].query["rankIds"] == ["3"]
    r = det("trial", "logs", "10", "--rank", "1", "2", "--rank", "5", "--tail", "2")
    assert r.rc == 0, r.err
    q = fake_master.calls("GET", "/api/v1/trials/10/logs")[-1].query
    assert q["rankIds"] == ["1", "2", "5"] and q["orderBy"] == ["ORDER_BY_DESC"]
    det("trial", "logs", "10")
    assert "rankIds" not in fake_master.calls("GET", "/api/v1/trials/10/logs")[-1].query


def test_a_rank_must_be_a_whole_number(fake_master, det):
    for bad in ("-1", "x", "2147483648"):
        r = det("trial", "logs", "10", "--rank", bad)
        assert r.rc == 2 and "rank" in r.err, (bad, r.err)
