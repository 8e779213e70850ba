"""The proxy's tickets and sessions are kept per user, each user capped on their own (their least
recently used go first), and the activity record drops the least recently used task."""

from __future__ import annotations

from controlplane.master import proxy_sessions as svc


def test_one_users_sessions_never_evict_anothers():
    proxy = svc.ProxySessions()
    bobs = proxy.new_session("bob-token", "nb-bob", owner=2)
    mine = [proxy.new_session("alice-token", "nb-alice", owner=1) for _ in range(10_000)]
    assert proxy.session_token(bobs, "nb-bob") == "bob-token"
    # Alice keeps her newest, up to her cap; her oldest went.
    assert proxy.sessions.count(1) == svc.MAX_SESSIONS_PER_OWNER and proxy.sessions.count(2) == 1
    assert proxy.session_token(mine[-1], "nb-alice") == "alice-token"
    assert proxy.session_token(mine[0], "nb-alice") is None
    # The same for tickets: alice's flood leaves bob's ticket good, once.
    ticket = proxy.mint_ticket("bob-token", "nb-bob", owner=2)
    for _ in range(1000):
        proxy.mint_ticket("alice-token", "nb-alice", owner=1)
    assert proxy.tickets.count(1) == svc.MAX_TICKETS_PER_OWNER
    assert proxy.redeem_ticket(ticket, "nb-bob") == ("bob-token", 2)
    assert proxy.redeem_ticket(ticket, "nb-bob") is None


def test_past_the_cap_the_least_recently_used_session_goes_not_the_first_made():
    proxy = svc.ProxySessions()
    first = proxy.new_session("t", "nb", owner=1)
    others = [proxy.new_session("t", "nb", owner=1) for _ in range(svc.MAX_SESSIONS_PER_OWNER - 1)]
    assert proxy.session_token(first, "nb") == "t"  # used now: the most recent
    proxy.new_session("t", "nb", owner=1)  # one over the cap
    assert proxy.session_token(first, "nb") == "t"
    assert proxy.session_token(others[0], "nb") is None  # the least recently used went
    assert proxy.session_token(first, "other-task") is None  # a session is good for its own task only


def test_expired_grants_go(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(svc.time, "monotonic", lambda: now[0])
    proxy = svc.ProxySessions()
    ticket = proxy.mint_ticket("t", "nb", owner=1)
    session = proxy.new_session("t", "nb", owner=1)
    now[0] += svc.TICKET_TTL_S + 1
    assert proxy.redeem_ticket(ticket, "nb") is None
    assert proxy.session_token(session, "nb") == "t"
    now[0] += svc.SESSION_TTL_S
    assert proxy.session_token(session, "nb") is None
    proxy.new_session("t", "nb", owner=2)  # a sweep drops every owner's expired grants
    now[0] += svc.SWEEP_EVERY_S + svc.SESSION_TTL_S + 1
    proxy.new_session("t", "nb", owner=3)
    assert len(proxy.sessions) == 1 and len(proxy.tickets) == 0


def test_touch_keeps_the_most_recently_used_tasks(monkeypatch):
    monkeypatch.setattr(svc, "MAX_TRACKED_TASKS", 3)
    proxy = svc.ProxySessions()
    for n, task in enumerate(("a", "b", "c")):
        proxy.touch(task, now=float(n))
    proxy.touch("a", now=10.0)  # "a" was first in, but is used again
    proxy.touch("d", now=11.0)
    assert proxy.idle_for("a", now=12.0) == 2.0
    assert proxy.idle_for("b", now=12.0) is None  # the least recently used went
    assert proxy.idle_for("d", now=12.0) == 1.0
