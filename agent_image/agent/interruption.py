"""Watches the instance metadata for a spot / preemptible interruption notice.

The notice gives about two minutes (EC2) or thirty seconds (GCE): the agent tells the master
at once, and the master raises the preemption signal of every trial on this agent so each
checkpoints before the instance goes.
"""

from __future__ import annotations

import asyncio
import logging

from controlplane.wire.agent_protocol import InstanceInterrupted

from .instance_metadata import InstanceMetadata, MetadataError
from .outbox import Outbox

log = logging.getLogger("det-agent")
POLL_S = 5.0


async def watch_interruptions(metadata: InstanceMetadata, agent_id: str, outbox: Outbox,
                              poll_s: float = POLL_S) -> None:
    while True:
        try:
            notice = await asyncio.to_thread(metadata.interruption_notice)
        except MetadataError as e:
            log.debug("interruption check failed: %s", e)
            notice = None
        if notice:
            log.warning("%s: asking the master to checkpoint this agent's trials", notice)
            outbox.put(InstanceInterrupted(agent_id=agent_id, reason=notice))
            return
        await asyncio.sleep(poll_s)
