"""Packing unplaceable gangs onto existing spare capacity and hypothetical new instances.

First-fit decreasing: gangs largest first, each into the lowest-numbered bin with room (with
mixed shapes: the bin with the least room that holds it, so whole instances stay free to go).
Bins are numbered in the order the caller prefers them used (idle agents that will be kept,
then booting instances, then launches in flight), and new instances are appended last, so
existing capacity absorbs demand before anything is launched. Per remaining-capacity heaps make
a first-fit lookup O(slots · log bins) rather than a scan of every bin, which keeps a tick with
10,000 gangs and 1,000 instances in milliseconds.

A new instance is of the launchable shape that costs least per slot the demand will use: a
gang of n slots with R slots of demand still to place (itself and the smaller gangs after it)
opens the shape minimising price / min(slots, R) among those that hold it. So 1-slot trials get
1-slot instances when those are cheaper per slot, and four of them share a 4-slot instance only
when that is cheaper than four 1-slot ones. A gang larger than every shape runs across whole
instances of one shape (the largest whose slots divide it: its ranks talk over the network, so
as few instances as can be) only when its size is a multiple of that shape's slots (the
scheduler's gang rule, gang.py); any other large gang can never fit and is reported.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Option:
    """A shape the planner may launch now: its instance type, slots and $/h (0: unknown)."""

    instance_type: str
    slots: int
    usd_per_hour: float = 0.0


@dataclass
class Packing:
    """Result: which existing bins the demand uses and what each has left, how many new
    instances of each type it needs, and the gang sizes (with counts) no instances could hold."""

    used: list[bool]
    left: list[int] = field(default_factory=list)  # free slots of each existing bin after packing
    new_by_type: dict[str, int] = field(default_factory=dict)
    placed_on_existing: int = 0
    unfittable: dict[int, int] = field(default_factory=dict)

    @property
    def new_instances(self) -> int:
        return sum(self.new_by_type.values())


def _cost_key(o: Option, need: int) -> tuple[float, int, int]:
    used = min(o.slots, need)
    return (o.usd_per_hour / used, o.slots - used, o.slots)


def pack(gangs: Sequence[int], bins: Sequence[int], options: Sequence[Option], *, best_fit: bool = False) -> Packing:
    """Pack `gangs` (slot counts) into existing `bins` (free slots each), opening new bins of
    the `options` when nothing fits. Zero-slot gangs need no slots and are skipped. `best_fit`:
    the existing bin with the least room that holds a gang, not the lowest-numbered one."""
    cap = list(bins)
    rem = list(bins)
    used = [False] * len(cap)
    top = max([*(o.slots for o in options), *cap, 1])
    heaps: list[list[int]] = [[] for _ in range(top + 1)]
    for i, c in enumerate(cap):
        if c > 0:
            heaps[c].append(i)  # ascending indices: already a valid heap
    out = Packing(used=used)
    n_existing = len(cap)
    largest = max((o.slots for o in options), default=0)
    order = sorted((g for g in gangs if g > 0), reverse=True)
    still = sum(order)
    for n in order:
        demand_left, still = still, still - n
        best, best_r = -1, -1
        for r in range(min(n, top + 1), top + 1):  # empty when n > every bin
            h = heaps[r]
            if h and (best < 0 or h[0] < best):
                best, best_r = h[0], r
                if best_fit:
                    break
        if best >= 0:
            heapq.heappop(heaps[best_r])
            left = best_r - n
            rem[best] = left
            if left:
                heapq.heappush(heaps[left], best)
            if best < n_existing:
                used[best] = True
                out.placed_on_existing += 1
            continue
        if n <= largest:
            o = min((o for o in options if o.slots >= n), key=lambda o: _cost_key(o, demand_left))
            idx = len(cap)
            cap.append(o.slots)
            rem.append(o.slots - n)
            if o.slots - n:
                heapq.heappush(heaps[o.slots - n], idx)
            out.new_by_type[o.instance_type] = out.new_by_type.get(o.instance_type, 0) + 1
            continue
        spans = [o for o in options if n % o.slots == 0]
        if not spans:
            out.unfittable[n] = out.unfittable.get(n, 0) + 1
            continue
        o = min(spans, key=lambda o: (-o.slots, o.usd_per_hour))  # its ranks talk over the network: fewest instances
        S, need = o.slots, n // o.slots
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
            out.new_by_type[o.instance_type] = out.new_by_type.get(o.instance_type, 0) + fresh
    out.left = rem[:n_existing]
    return out
