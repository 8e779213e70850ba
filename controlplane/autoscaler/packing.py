"""Packing unplaceable gangs onto existing spare capacity and hypothetical new instances.

First-fit decreasing: gangs largest first, each into the lowest-numbered bin with room. Bins
are numbered in the order the caller prefers them used (idle agents that will be kept, then
booting instances, then launches in flight), and new instances are appended last, so existing
capacity absorbs demand before anything is launched. Per remaining-capacity heaps make a
first-fit lookup O(slots · log bins) rather than a scan of every bin, which keeps a tick with
10,000 gangs and 1,000 instances in milliseconds.

A gang larger than one instance runs across whole instances of the pool's shape only when its
size is a multiple of `slots_per_instance` (the scheduler's gang rule, gang.py); any other
large gang can never fit and is reported, not scaled for.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Packing:
    """Result: which existing bins the demand uses, how many new instances it needs, and the
    gang sizes (with counts) that no set of instances of this shape could ever hold."""

    used: list[bool]
    new_instances: int = 0
    placed_on_existing: int = 0
    unfittable: dict[int, int] = field(default_factory=dict)


def pack(gangs: Sequence[int], bins: Sequence[int], slots_per_instance: int) -> Packing:
    """Pack `gangs` (slot counts) into existing `bins` (free slots each), opening new bins of
    `slots_per_instance` when nothing fits. Zero-slot gangs need no slots and are skipped."""
    S = slots_per_instance
    cap = list(bins)
    rem = list(bins)
    used = [False] * len(cap)
    top = max([S, *cap]) if cap else S
    heaps: list[list[int]] = [[] for _ in range(top + 1)]
    for i, c in enumerate(cap):
        if c > 0:
            heaps[c].append(i)  # ascending indices: already a valid heap
    out = Packing(used=used)
    n_existing = len(cap)
    for n in sorted((g for g in gangs if g > 0), reverse=True):
        best, best_r = -1, -1
        for r in range(min(n, top + 1), top + 1):  # empty when n > every bin
            h = heaps[r]
            if h and (best < 0 or h[0] < best):
                best, best_r = h[0], r
        if best >= 0:
            heapq.heappop(heaps[best_r])
            left = best_r - n
            rem[best] = left
            if left:
                heapq.heappush(heaps[left], best)
            if best < n_existing:
                if not used[best]:
                    used[best] = True
                out.placed_on_existing += 1
            continue
        if n <= S:
            idx = len(cap)
            cap.append(S)
            rem.append(S - n)
            if S - n:
                heapq.heappush(heaps[S - n], idx)
            out.new_instances += 1
            continue
        if n % S:
            out.unfittable[n] = out.unfittable.get(n, 0) + 1
            continue
        need = n // S
        took: list[int] = []
        skipped: list[int] = []
        h = heaps[S]
        while h and len(took) < need:
            i = heapq.heappop(h)
            (took if cap[i] == S and rem[i] == S else skipped).append(i)
        for i in skipped:
            heapq.heappush(h, i)
        for i in took:
            rem[i] = 0
            if i < n_existing:
                used[i] = True
        if took and took[0] < n_existing:
            out.placed_on_existing += 1
        fresh = need - len(took)
        if fresh:
            cap.extend([S] * fresh)
            rem.extend([0] * fresh)
            out.new_instances += fresh
    return out
