"""Where the task runs: the agent's info files (reference §4.3), else the DET_* environment.

``DET_INFO_DIR`` names the directory of ``cluster.json``/``trial.json``/``rendezvous.json``;
without them, ``DET_MASTER`` + ``DET_SESSION_TOKEN`` (+ the other DET_* vars, §4.2) are used;
with neither, the code runs off the cluster and :func:`get_cluster_info` returns None.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.core._session import canonical_master_url


@dataclass(frozen=True)
class TrialInfo:
    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    steps_completed: int
    trial_run_id: int

    @property
    def _config(self) -> dict[str, Any]:  # determined's name for the experiment config
        return self.config

    @property
    def user_data(self) -> dict[str, Any]:
        return self.config.get("data") or {}


@dataclass(frozen=True)
class ClusterInfo:
    master_url: str
    cluster_id: str
    agent_id: str
    slot_ids: list[int]
    task_id: str
    allocation_id: str
    session_token: str
    task_type: str
    latest_checkpoint: str | None
    trial: TrialInfo | None = None
    container_addrs: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    container_rank: int = 0
    # ports.json, beside Determined's rendezvous.json: the master-chosen ports of the allocation (0 / empty
    # when the agent did not say) and the allocation's SSH key (a path), read by the launchers.
    container_slot_counts: list[int] = field(default_factory=list)
    chief_port: int = 0  # the chief's c10d port (torch.distributed.run --master_port)
    dist_ports: list[int] = field(default_factory=list)  # DET_DIST_PORTS on the chief
    ssh_ports: list[int] = field(default_factory=list)  # per container, 0 for the chief
    ssh_key_file: str | None = None

    @property
    def master_cert_file(self) -> None:
        return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _trial_from(d: dict[str, Any]) -> TrialInfo:
    return TrialInfo(trial_id=int(d["trial_id"]), experiment_id=int(d["experiment_id"]),
                     trial_seed=int(d.get("trial_seed", 0)), hparams=d.get("hparams") or {},
                     config=d.get("config") or {}, steps_completed=int(d.get("steps_completed", 0)),
                     trial_run_id=int(d.get("trial_run_id", 0)))


def _trial_from_env(env: dict[str, str]) -> TrialInfo | None:
    if not env.get("DET_TRIAL_ID"):
        return None
    return TrialInfo(trial_id=int(env["DET_TRIAL_ID"]), experiment_id=int(env.get("DET_EXPERIMENT_ID", 0)),
                     trial_seed=int(env.get("DET_TRIAL_SEED", 0)), hparams=json.loads(env.get("DET_HPARAMS") or "{}"),
                     config=json.loads(env.get("DET_EXPERIMENT_CONFIG") or "{}"),
                     steps_completed=int(env.get("DET_STEPS_COMPLETED", 0)),
                     trial_run_id=int(env.get("DET_TRIAL_RUN_ID", 0)))


def from_files(info_dir: Path, env: dict[str, str]) -> ClusterInfo | None:
    cluster = _read_json(info_dir / "cluster.json")
    if cluster is None:
        return None
    trial = _read_json(info_dir / "trial.json")
    # Determined's rendezvous.json, and the master-chosen ports this platform adds beside it.
    rendezvous = {**(_read_json(info_dir / "rendezvous.json") or {}), **(_read_json(info_dir / "ports.json") or {})}
    return ClusterInfo(
        master_url=canonical_master_url(cluster["master_url"]), cluster_id=cluster.get("cluster_id", ""),
        agent_id=cluster.get("agent_id", ""), slot_ids=list(cluster.get("slot_ids") or []),
        task_id=cluster["task_id"], allocation_id=cluster["allocation_id"],
        session_token=cluster["session_token"], task_type=cluster.get("task_type", "TRIAL"),
        latest_checkpoint=cluster.get("latest_checkpoint") or None,
        trial=_trial_from(trial) if trial else _trial_from_env(env),
        container_addrs=list(rendezvous.get("container_addrs") or ["127.0.0.1"]),
        container_rank=int(rendezvous.get("container_rank", 0)),
        container_slot_counts=[int(n) for n in rendezvous.get("container_slot_counts") or []],
        chief_port=int(rendezvous.get("chief_port") or 0),
        dist_ports=[int(p) for p in rendezvous.get("dist_ports") or []],
        ssh_ports=[int(p) for p in rendezvous.get("ssh_ports") or []],
        ssh_key_file=(str(info_dir / rendezvous["ssh_key_file"]) if rendezvous.get("ssh_key_file") else None),
    )


def from_env(env: dict[str, str]) -> ClusterInfo | None:
    if not env.get("DET_MASTER") or not env.get("DET_SESSION_TOKEN"):
        return None
    return ClusterInfo(
        master_url=canonical_master_url(env["DET_MASTER"]), cluster_id=env.get("DET_CLUSTER_ID", ""),
        agent_id=env.get("DET_AGENT_ID", ""), slot_ids=json.loads(env.get("DET_SLOT_IDS") or "[]"),
        task_id=env.get("DET_TASK_ID", ""), allocation_id=env.get("DET_ALLOCATION_ID", ""),
        session_token=env["DET_SESSION_TOKEN"], task_type=env.get("DET_TASK_TYPE", "TRIAL"),
        latest_checkpoint=env.get("DET_LATEST_CHECKPOINT") or None, trial=_trial_from_env(env),
    )


def get_cluster_info(env: Any = None) -> ClusterInfo | None:
    """None off the cluster: the same script then runs on a laptop."""
    env = dict(os.environ if env is None else env)
    if env.get("DET_INFO_DIR"):
        info = from_files(Path(env["DET_INFO_DIR"]), env)
        if info is not None:
            return info
    return from_env(env)
