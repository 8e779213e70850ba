"""What one running master holds in memory: caches a restart rebuilds, never truth."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from controlplane.master.db.outage import DatabaseHealth
from controlplane.master.settings import MasterSettings
from controlplane.master.stream_slots import StreamSlots

if TYPE_CHECKING:
    from controlplane.master.autoscaling.service import AutoscalerService
    from controlplane.master.checkpoint_gc.loop import CheckpointGcLoop
    from controlplane.master.log_ring import LogRing
    from controlplane.master.orchestration.hub import AgentHub
    from controlplane.master.orchestration.orchestrator import Orchestrator
    from controlplane.master.services.metric_writer import MetricWriter


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
class MasterRuntime:
    settings: MasterSettings
    engine: AsyncEngine
    sessions: async_sessionmaker
    cluster_id: str = ""
    master_id: str = ""
    notifier: Notifier = field(default_factory=Notifier)
    streams: StreamSlots = field(default_factory=StreamSlots)  # long answers' slots (stream_slots.py)
    db_health: DatabaseHealth = field(default_factory=DatabaseHealth)  # database outages, logged once (db/outage.py)
    # Wired by create_app right after construction (they need the runtime themselves).
    hub: AgentHub = field(init=False)
    orchestrator: Orchestrator = field(init=False)
    checkpoint_gc: CheckpointGcLoop = field(init=False)
    metric_writer: MetricWriter = field(init=False)
    autoscaler: AutoscalerService | None = None  # None when no pool has a provider
    log_ring: LogRing | None = None  # the master's recent log lines (det master logs), while it runs
    proxy_port: int | None = None  # the task proxy's listener, once bound (serving.Listeners)
