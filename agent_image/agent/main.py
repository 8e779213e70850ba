"""Entry point of ``det-agent``: parse flags, detect slots, serve the master until told to stop.

Exit codes: 0 after SIGTERM/SIGINT (tasks killed first), 2 when the master rejects the join
token, 1 when the agent dies of an unexpected error. Every exit says why in the log, the last
line of a dying agent included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from .addresses import local_addresses
from .config import AgentConfig, parse_config
from .connection import EXIT_TOKEN_REJECTED, Connection
from .environments import load_environments
from .outbox import Outbox
from .runtime import task_sandbox
from .slots import detect_slots
from .task_network import task_networks
from .tasks import TaskRunner

log = logging.getLogger("det-agent")

SHUTDOWN_KILL_MAX = 10.0
SHUTDOWN_FLUSH = 3.0
EXIT_DIED = 1


async def run_agent(cfg: AgentConfig) -> int:
    slots = detect_slots(cfg.slots, cfg.slot_type)
    log.info("agent %s: %d %s slot(s), pool %s", cfg.agent_id, len(slots), slots[0].type if slots else "-", cfg.pool)
    cfg.work_dir.mkdir(parents=True, exist_ok=True)
    environments = await asyncio.to_thread(load_environments, cfg.environments)  # refuses a broken one
    log.info("agent %s offers environments: %s", cfg.agent_id, ", ".join(environments))
    sandbox = await asyncio.to_thread(task_sandbox, cfg)  # refuses to start without one (unless opted out)
    addresses = local_addresses(cfg.master_url)
    networks = task_networks(cfg.task_network, addresses) if sandbox is not None else None
    overlay_port = await networks.start() if networks is not None else 0
    outbox = Outbox()
    conn: Connection | None = None
    runner = TaskRunner(
        master_url=cfg.master_url,
        agent_id=cfg.agent_id,
        work_dir=cfg.work_dir,
        slots=slots,
        outbox=outbox,
        cluster_id=lambda: conn.cluster_id if conn else "",
        sandbox=sandbox,
        environments=environments,
        disk_quota=cfg.task_disk_quota,
        networks=networks,
    )
    conn = Connection(
        ws_url=cfg.ws_url,
        join_token=cfg.join_token,
        agent_id=cfg.agent_id,
        pool=cfg.pool,
        slots=slots,
        addresses=addresses,
        outbox=outbox,
        runner=runner,
        overlay_port=overlay_port,
        instance_type=cfg.instance_type,
    )

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stopped_by: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped_by.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    conn_task = asyncio.create_task(conn.run(), name="connection")
    stop_task = asyncio.create_task(stop.wait(), name="stop")
    watchers = []
    if cfg.cloud != "none":
        from .config import metadata_for
        from .interruption import watch_interruptions

        watchers.append(asyncio.create_task(
            watch_interruptions(metadata_for(cfg.cloud, cfg.metadata_url), cfg.agent_id, outbox), name="interruptions"))
    done, _ = await asyncio.wait({conn_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    rc = 0
    if conn_task in done:
        rc = conn_task.result()
        if rc == EXIT_TOKEN_REJECTED:
            log.error("agent %s exiting: the master rejected the join token", cfg.agent_id)
    else:
        log.info("agent %s shutting down cleanly on %s: killing %d task(s)", cfg.agent_id,
                 stopped_by[0] if stopped_by else "request", len(runner.running_ids()))
    await runner.kill_all(SHUTDOWN_KILL_MAX)
    if not conn_task.done() and conn.connected.is_set():
        await outbox.wait_empty(SHUTDOWN_FLUSH)
    for t in (conn_task, stop_task, *watchers):
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await t
    if networks is not None:
        await networks.close()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    return rc


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    logging.basicConfig(
        level=getattr(logging, cfg.log_level, logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("websockets").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        rc = asyncio.run(run_agent(cfg))
    except Exception as exc:  # noqa: BLE001 - an agent never dies without saying why
        log.critical("agent %s died: %s: %s", cfg.agent_id, type(exc).__name__, exc, exc_info=exc)
        return EXIT_DIED
    log.info("agent %s exited with status %d", cfg.agent_id, rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
