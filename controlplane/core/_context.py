"""core.init(): the one entry point training code calls, on the cluster or off it.

On the cluster (info files or DET_* env present) it announces the run, starts the metric
shipper and the preemption watcher, and opens the experiment's checkpoint storage. Off it,
metrics are printed and checkpoints kept in ``./checkpoints``, so one script runs both ways.
"""

from __future__ import annotations

import enum
import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from controlplane.core import storage as storage_mod
from controlplane.core._checkpoint import CheckpointContext
from controlplane.core._distributed import DistributedContext
from controlplane.core._info import ClusterInfo, get_cluster_info
from controlplane.core._metrics import MetricShipper
from controlplane.core._preempt import PreemptContext, PreemptMode
from controlplane.core._searcher import SearcherContext
from controlplane.core._searcher import max_length as max_length_of
from controlplane.core._session import MasterError, Session
from controlplane.core._train import EarlyExitReason, TrainContext

log = logging.getLogger("controlplane.core")


class InvalidHP(Exception):
    """Raise inside ``with core.init()`` when the hyperparameters cannot work: on the cluster the
    trial is reported as an early exit and the process exits 0 (as Determined does)."""


class TensorboardMode(enum.Enum):
    """Accepted for compatibility; this version writes no TensorBoard files."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class Context:
    """What ``core.init()`` returns: ``.info .train .checkpoint .searcher .preempt .distributed``."""

    def __init__(self, info: ClusterInfo | None, checkpoint: CheckpointContext, train: TrainContext,
                 searcher: SearcherContext, preempt: PreemptContext, session: Session | None,
                 shipper: MetricShipper | None, distributed: DistributedContext | None = None) -> None:
        self.info = info
        self.checkpoint = checkpoint
        self.train = train
        self.searcher = searcher
        self.preempt = preempt
        self.distributed = distributed if distributed is not None else DistributedContext()
        self._session = session
        self._shipper = shipper
        self._closed = False

    def __enter__(self) -> Context:
        return self

    def __exit__(self, typ: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(value, InvalidHP) and self._session is not None:
            log.info("InvalidHP: reporting an early exit and exiting 0")
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            self.close()
            raise SystemExit(0) from value
        if value is None:
            self.close()
            return
        try:  # the training code's exception is the one to see
            self.close()
        except Exception:
            log.exception("closing the core context after an error")

    def close(self) -> None:
        """Flushes every metric report and stops the background threads."""
        if self._closed:
            return
        self._closed = True
        self.preempt.close()
        try:
            if self._shipper is not None:
                self._shipper.close()
        finally:
            self.distributed.close()
            if self._session is not None:
                self._session.close()


def _off_cluster(info: ClusterInfo | None, storage: storage_mod.StorageManager, length: int | None,
                 preempt: PreemptContext, dist: DistributedContext) -> Context:
    reason = ("off the cluster there is no searcher: pass core.init(max_length_off_cluster=N) to train N steps"
              if info is None else f"a {info.task_type} task has no searcher")
    return Context(info, CheckpointContext(storage, None, None, dist=dist),
                   TrainContext(None, None, None, None, is_chief=dist.rank == 0),
                   SearcherContext(length, None, None, missing_reason=reason, dist=dist), preempt, None, None, dist)


def _in_container() -> bool:
    """Whether this task runs in a container-like sandbox (anything but the agent's plain
    ``local-process`` runtime), where a shared_fs host_path is mounted at its container_path."""
    return os.environ.get("DET_RESOURCES_TYPE", "local-process") not in ("", "local-process")


def _check_distributed(distributed: DistributedContext | None, info: ClusterInfo | None) -> DistributedContext:
    if distributed is not None:
        if not isinstance(distributed, DistributedContext):
            raise TypeError(f"distributed must be a core.DistributedContext, got {type(distributed).__name__}")
        return distributed
    if info is not None and info.trial is not None and (len(info.container_addrs) > 1 or len(info.slot_ids) > 1):
        world = os.environ.get("WORLD_SIZE")
        hint = ("core.init(distributed=core.DistributedContext.from_torch_distributed())" if world and world != "1"
                else "a launcher such as python3 -m launchers.torch_distributed, and pass "
                     "core.init(distributed=core.DistributedContext.from_torch_distributed())")
        raise ValueError(f"this trial has {len(info.slot_ids)} slots on {len(info.container_addrs)} container(s): "
                         f"a multi-slot task needs a DistributedContext; use {hint}")
    return DistributedContext()


def init(*, max_length_off_cluster: int | None = None, max_length: int | None = None,
         checkpoint_dir: str | Path = "checkpoints", checkpoint_storage: str | dict[str, Any] | None = None,
         distributed: DistributedContext | None = None, preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> Context:
    """The core context. On the cluster: the task's info, metrics to the master, checkpoints to
    the experiment's ``checkpoint_storage`` (or ``checkpoint_storage=`` given here). Off it:
    metrics printed, checkpoints in ``checkpoint_dir`` (./checkpoints), and
    ``searcher.operations()`` yields one op of ``max_length_off_cluster`` (alias ``max_length``).

    ``distributed``: required for a multi-slot trial (``DistributedContext.from_torch_distributed()``
    under the torch launcher). Only its chief reports metrics, progress and checkpoints."""
    local_dir = Path(checkpoint_dir).resolve()
    info = get_cluster_info()
    dist = _check_distributed(distributed, info)
    if info is None:
        storage = storage_mod.from_config(checkpoint_storage, local_dir)
        return _off_cluster(None, storage, max_length_off_cluster or max_length,
                            PreemptContext(None, None, dist, preempt_mode), dist)
    session = Session(info.master_url, info.session_token)
    trial = info.trial
    if trial is None:  # a non-TRIAL task: real preemption, nothing else to report
        storage = storage_mod.from_config(checkpoint_storage, local_dir, in_container=_in_container())
        return _off_cluster(info, storage, None, PreemptContext(session, info.allocation_id, dist, preempt_mode), dist)

    cfg_storage = trial.config.get("checkpoint_storage")
    chief = dist.rank == 0
    storage_id = None
    if chief:
        try:
            started = session.post("/api/v1/runs/start", json={"runId": trial.trial_id,
                                                               "checkpointStorage": cfg_storage})
            body = started.json() if started.content else {}
            storage_id = body.get("storageId") if isinstance(body, dict) else None
        except MasterError as e:
            if e.status != 404:
                session.close()
                dist.broadcast(None)
                raise
    storage_id = dist.broadcast(storage_id)
    storage = storage_mod.from_config(checkpoint_storage or cfg_storage, local_dir, in_container=_in_container())
    preempt = PreemptContext(session, info.allocation_id, dist, preempt_mode)
    shipper = MetricShipper(session.clone(), trial.trial_id) if chief else None
    length = max_length_of(trial.config)
    return Context(
        info,
        CheckpointContext(storage, session, info, before_report=shipper.flush if shipper else lambda: None,
                          storage_id=storage_id, dist=dist),
        TrainContext(shipper, session, trial.trial_id, trial.experiment_id, trial.trial_run_id, is_chief=chief),
        SearcherContext(length[0] if length else None, session, trial.trial_id, unit=length[1] if length else "",
                        missing_reason="searcher.max_length is not set in the experiment config, so there is "
                                       "no searcher operation to train for", dist=dist),
        preempt, session, shipper, dist,
    )
