"""Caches of facts that never change stay bounded on a master that runs for months."""

from controlplane.common.bounded_cache import BoundedCache


def test_the_oldest_entry_goes_first_once_full():
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)  # written again: now the newest
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (10, None, 3, 2)
