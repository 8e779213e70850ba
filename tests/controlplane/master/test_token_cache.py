"""The token cache never brings back a revoked token, even from a lookup that raced the revocation."""

from __future__ import annotations

from controlplane.master.principals import AuthedUser
from controlplane.master.token_cache import _TTLCache


def test_a_dropped_token_is_not_cached_again_by_a_lookup_that_read_before_the_drop():
    cache: _TTLCache = _TTLCache(ttl_s=60)
    cache.put("t", AuthedUser(1, "a"))
    stale = cache.get("t")
    cache.drop("t")  # revoked while a lookup was reading the old row
    cache.put("t", stale)  # that lookup finishes
    assert cache.get("t") is None  # the next request goes to the database


def test_dropping_a_users_entries_fences_their_other_tokens_too():
    cache: _TTLCache = _TTLCache(ttl_s=60)
    cache.put("a1", AuthedUser(1, "a"))
    cache.put("b1", AuthedUser(2, "b"))
    assert cache.drop_where(lambda u: u.id == 1) == 1
    cache.put("a2", AuthedUser(1, "a"))  # a session of user 1 that was not cached yet
    cache.put("b2", AuthedUser(2, "b"))
    assert cache.get("a1") is None and cache.get("a2") is None
    assert cache.get("b1") is not None and cache.get("b2") is not None


def test_a_fence_ends():
    cache: _TTLCache = _TTLCache(ttl_s=60, fence_s=0)
    cache.drop("t")
    cache.put("t", AuthedUser(1, "a"))
    assert cache.get("t") == AuthedUser(1, "a")
