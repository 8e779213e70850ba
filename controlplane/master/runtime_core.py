"""What every part of one running master shares: settings, the database, wake-ups and slots.

The master's parts (orchestrator, autoscaler, checkpoint GC, metric writer) take this, never the
whole ``MasterRuntime`` (``runtime.py``) that holds them, so none of them imports another through it:
what one part needs of another it gets as a callback when ``app.build_runtime`` wires them.
Caches a restart rebuilds, never truth.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from controlplane.master.db.outage import DatabaseHealth
from controlplane.master.proxy_sessions import ProxySessions
from controlplane.master.settings import MasterSettings
from controlplane.master.stream_slots import StreamSlots
from controlplane.master.token_cache import TokenCaches

if TYPE_CHECKING:
    from controlplane.master.agent_hub import AgentHub
    from controlplane.master.log_ring import LogRing


class Notifier:
    """Wakes long-polls and log followers: one asyncio.Condition-like event per key."""

    def __init__(self) -> None:
        self._events: dict[object, asyncio.Event] = {}

    def notify(self, key: object) -> None:
        ev = self._events.pop(key, None)
        if ev is not None:
            ev.set()

    async def wait(self, key: object, timeout: float) -> bool:
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel on 3.11
                await ev.wait()
            return True
        except TimeoutError:
            return False


@dataclass
class RuntimeCore:
    settings: MasterSettings
    engine: AsyncEngine
    sessions: async_sessionmaker[Any]
    cluster_id: str = ""
    master_id: str = ""
    notifier: Notifier = field(default_factory=Notifier)
    streams: StreamSlots = field(default_factory=StreamSlots)  # long answers' slots (stream_slots.py)
    db_health: DatabaseHealth = field(default_factory=DatabaseHealth)  # database outages, logged once (db/outage.py)
    tokens: TokenCaches = field(default_factory=TokenCaches)  # user and task token lookups (token_cache.py)
    proxy: ProxySessions = field(default_factory=ProxySessions)  # the task proxy's state (proxy_sessions.py)
    hub: AgentHub = field(init=False)  # the agents' connections; set by app.build_runtime
    log_ring: LogRing | None = None  # the master's recent log lines (det master logs), while it runs
    proxy_port: int | None = None  # the task proxy's listener, once bound (serving.Listeners)
