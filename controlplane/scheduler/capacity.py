"""Free slots of one pool, indexed for fast gang fitting.

Agents sit in buckets by their number of free slots, and idle agents also by their size, so
finding a place for a gang costs a few dictionary looks instead of a scan of every agent.
Buckets keep insertion order (agents come in sorted by id), which makes every choice
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.scheduler.model import AgentSnapshot

Resources = tuple[tuple[str, tuple[int, ...]], ...]


class Capacity:
    def __init__(self, agents: Iterable[AgentSnapshot], fitting_policy: str = "best") -> None:
        self.best = fitting_policy != "worst"
        self.free: dict[str, list[int]] = {}
        self.size: dict[str, int] = {}
        self.by_free: dict[int, dict[str, None]] = {}
        self.idle_by_size: dict[int, dict[str, None]] = {}
        self.count_by_size: dict[int, int] = {}
        for a in sorted(agents, key=lambda a: a.agent_id):
            if not a.schedulable:
                continue
            free = sorted(s for s in a.slot_ids if s not in a.used_slot_ids)
            self.free[a.agent_id] = free
            self.size[a.agent_id] = len(a.slot_ids)
            self.count_by_size[len(a.slot_ids)] = self.count_by_size.get(len(a.slot_ids), 0) + 1
            self._index(a.agent_id)
        self.max_free = max(self.by_free, default=0)

    def _index(self, agent_id: str) -> None:
        n = len(self.free[agent_id])
        self.by_free.setdefault(n, {})[agent_id] = None
        if n == self.size[agent_id] and n > 0:
            self.idle_by_size.setdefault(n, {})[agent_id] = None

    def _unindex(self, agent_id: str) -> None:
        n = len(self.free[agent_id])
        self.by_free[n].pop(agent_id, None)
        if n == self.size[agent_id]:
            self.idle_by_size.get(n, {}).pop(agent_id, None)

    def find(self, n: int, allowed: set[str] | None = None) -> Resources | None:
        """Where a gang of n slots fits now: one agent, else whole idle agents of one size."""
        counts = [f for f, bucket in self.by_free.items() if f >= n and bucket]
        for f in sorted(counts, reverse=not self.best):
            for agent_id in self.by_free[f]:
                if allowed is None or agent_id in allowed:
                    return ((agent_id, tuple(self.free[agent_id][:n])),)
        for k in sorted(self.idle_by_size, reverse=True):
            idle = self.idle_by_size[k]
            if k == 0 or n % k or len(idle) < n // k:
                continue
            chosen = [a for a in idle if allowed is None or a in allowed][: n // k]
            if len(chosen) == n // k:
                return tuple((a, tuple(self.free[a])) for a in chosen)
        return None

    def take(self, resources: Resources) -> None:
        for agent_id, slots in resources:
            self._unindex(agent_id)
            taken = set(slots)
            self.free[agent_id] = [s for s in self.free[agent_id] if s not in taken]
            self._index(agent_id)

    def give_back(self, resources: Resources) -> None:
        for agent_id, slots in resources:
            if agent_id not in self.free:
                continue
            self._unindex(agent_id)
            self.free[agent_id] = sorted(set(self.free[agent_id]) | set(slots))
            self._index(agent_id)

    def could_ever_fit(self, n: int) -> bool:
        """With every agent of the pool idle."""
        if any(size >= n for size in self.count_by_size):
            return True
        return any(k and n % k == 0 and count >= n // k for k, count in self.count_by_size.items())

    def agents_usable_by(self, n: int) -> set[str]:
        """Agents a gang of n could ever use: big enough alone, or of a size that tiles n."""
        sizes = {k for k, count in self.count_by_size.items()
                 if k >= n or (k and n % k == 0 and count >= n // k)}
        return {a for a, size in self.size.items() if size in sizes}

    def copy(self) -> "Capacity":
        other = Capacity((), "best" if self.best else "worst")
        other.free = {a: list(f) for a, f in self.free.items()}
        other.size = dict(self.size)
        other.count_by_size = dict(self.count_by_size)
        for a in other.free:
            other._index(a)
        return other
