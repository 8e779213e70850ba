"""Builds the StartTask message for an allocation: the DET_* environment of reference §4.2."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.config.harness_view import harness_config
from controlplane.master.agent_hub import AgentConnection
from controlplane.master.db.models import Allocation, Checkpoint, Experiment, Trial
from controlplane.master.orchestration import gang, rendezvous
from controlplane.master.orchestration.spread_network import SpreadNetwork
from controlplane.scheduler.environment import Image
from controlplane.wire import agent_protocol as wire


def trial_env(exp: Experiment, trial: Trial, alloc: Allocation, owner: str, cluster_id: str,
              latest: Checkpoint | None, token: str) -> dict[str, str]:
    cfg = exp.config
    env: dict[str, str] = {}
    env_vars = (cfg.get("environment") or {}).get("environment_variables") or []
    if isinstance(env_vars, dict):  # {cpu: [...], cuda: [...]}: pick by the slots we got
        env_vars = env_vars.get("cpu", []) + []
    for entry in env_vars:
        key, _, value = str(entry).partition("=")
        env[key] = value
    env.update({
        "DET_CLUSTER_ID": cluster_id,
        "DET_TASK_ID": trial.task_id,
        "DET_ALLOCATION_ID": alloc.id,
        "DET_SESSION_TOKEN": token,
        "DET_RESOURCES_ID": alloc.id,
        "DET_USER": owner,
        "DET_TASK_TYPE": "TRIAL",
        "DET_TRIAL_ID": str(trial.id),
        "DET_EXPERIMENT_ID": str(exp.id),
        "DET_TRIAL_RUN_ID": str(trial.run_id),
        "DET_TRIAL_SEED": str(trial.seed),
        "DET_HPARAMS": json.dumps(trial.hparams),
        "DET_EXPERIMENT_CONFIG": json.dumps(harness_config(cfg)),
        "DET_STEPS_COMPLETED": str(latest.steps_completed if latest else 0),
    })
    restore_from = restore_point(trial, latest)
    if restore_from is not None:
        env["DET_LATEST_CHECKPOINT"] = restore_from
    return env


def restore_point(trial: Trial, latest: Checkpoint | None) -> str | None:
    """DET_LATEST_CHECKPOINT: the trial's latest checkpoint, else the one it warm-starts from (as
    Determined's trial.go, with DET_STEPS_COMPLETED 0: the code tells another trial's checkpoint by
    its trial id and keeps its weights, not its step count)."""
    return latest.uuid if latest is not None else trial.warm_start_checkpoint


def trial_info(exp: Experiment, trial: Trial, latest: Checkpoint | None) -> dict[str, Any]:
    """info/trial.json (reference §4.3)."""
    return {
        "trial_id": trial.id,
        "experiment_id": exp.id,
        "trial_seed": trial.seed,
        "hparams": trial.hparams,
        "config": harness_config(exp.config),
        "steps_completed": latest.steps_completed if latest else 0,
        "trial_run_id": trial.run_id,
        "debug": False,
        "inter_node_network_interface": None,
    }


def start_message(exp: Experiment, trial: Trial, alloc: Allocation, owner: str, cluster_id: str,
                  latest: Checkpoint | None, token: str, kill_grace_s: float) -> wire.StartTask:
    return wire.StartTask(
        allocation_id=alloc.id,
        task_id=trial.task_id,
        task_type="TRIAL",
        entrypoint=exp.config["entrypoint"],
        env=trial_env(exp, trial, alloc, owner, cluster_id, latest, token),
        slot_ids=list(alloc.slot_ids),
        session_token=token,
        context_hash=exp.context_hash,
        trial_info=trial_info(exp, trial, latest),
        kill_grace_seconds=kill_grace_s,
        readable_checkpoints=readable_checkpoints(trial, latest),
        pip_requirements=list((exp.config.get("environment") or {}).get("pip_requirements") or []),
    )


def readable_checkpoints(trial: Trial, latest: Checkpoint | None) -> list[str]:
    """What a trial's task may read of a shared_fs (the agent mounts only these, read-only): the
    checkpoint it restores from (DET_LATEST_CHECKPOINT) and the one it warm-starts from."""
    source = trial.warm_start_checkpoint
    uuids = [latest.uuid] if latest is not None else []
    if source is not None and source not in uuids:
        uuids.append(source)
    return uuids


def gang_start_messages(base: Callable[[], wire.StartTask], alloc: Allocation, network: SpreadNetwork | None,
                        environment_of: Callable[[str], str]) -> list[tuple[str, wire.StartTask]]:
    """(agent, StartTask) for each rank of the placed allocation, its ports and addresses recorded
    (``rendezvous.assign``): ``base()`` makes a rank's message before its rank's part is set;
    ``environment_of`` picks the task environment an agent runs it in."""
    ranks = sorted(gang.resources_of(alloc), key=lambda r: r.rank)
    info = rendezvous.info(alloc)
    ssh_key = rendezvous.new_ssh_key() if len(ranks) > 1 else ""
    out = []
    for r in ranks:
        msg = base()
        msg.slot_ids = list(r.slot_ids)
        msg.env["DET_RESOURCES_ID"] = rendezvous.resources_id(alloc.id, r.rank)
        msg.rank, msg.container_addrs = r.rank, info["container_addrs"]
        msg.container_slot_counts = info["container_slot_counts"]
        msg.chief_port, msg.dist_ports = info["chief_port"], info["dist_ports"]
        msg.ssh_ports, msg.ssh_key = info["ssh_ports"], ssh_key
        # its own network: on one agent, or spread over agents that all make task networks
        msg.network = alloc.id if len(ranks) == 1 or network is not None else ""
        msg.overlay = network.for_agent(r.agent_id) if network is not None else None
        msg.environment = environment_of(r.agent_id)
        out.append((r.agent_id, msg))
    return out


def environment_on(image: Image, connections: Mapping[str, AgentConnection], agent_id: str) -> str:
    """The task environment of ``image`` for the agent's slot type (CPU when it is gone)."""
    conn = connections.get(agent_id)
    return image.for_slot_type(conn.slot_type if conn else "cpu")
