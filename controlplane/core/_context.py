"""core.init(): the one entry point training code calls, on the cluster or off it.

On the cluster (info files or DET_* env present) it announces the run, starts the metric
shipper and the preemption watcher, and opens the experiment's checkpoint storage. Off it,
metrics are printed and checkpoints kept in ``./checkpoints``, so one script runs both ways.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from controlplane.core import storage as storage_mod
from controlplane.core._checkpoint import CheckpointContext
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


@dataclass(frozen=True)
class DistributedContext:
    """One process per trial in this version: rank 0 of 1."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    cross_rank: int = 0
    cross_size: int = 1

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def broadcast(self, obj: Any) -> Any:
        return obj

    def broadcast_local(self, obj: Any) -> Any:
        return obj

    def allgather(self, obj: Any) -> list:
        return [obj]

    def allgather_local(self, obj: Any) -> list:
        return [obj]

    def gather(self, obj: Any) -> list:
        return [obj]

    def gather_local(self, obj: Any) -> list:
        return [obj]


class Context:
    """What ``core.init()`` returns: ``.info .train .checkpoint .searcher .preempt .distributed``."""

    def __init__(self, info: ClusterInfo | None, checkpoint: CheckpointContext, train: TrainContext,
                 searcher: SearcherContext, preempt: PreemptContext, session: Session | None,
                 shipper: MetricShipper | None) -> None:
        self.info = info
        self.checkpoint = checkpoint
        self.train = train
        self.searcher = searcher
        self.preempt = preempt
        self.distributed = DistributedContext()
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
        except Exception:  # noqa: BLE001
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
            if self._session is not None:
                self._session.close()


def _off_cluster(info: ClusterInfo | None, storage: storage_mod.StorageManager, length: int | None,
                 preempt: PreemptContext) -> Context:
    reason = ("off the cluster there is no searcher: pass core.init(max_length_off_cluster=N) to train N steps"
              if info is None else f"a {info.task_type} task has no searcher")
    return Context(info, CheckpointContext(storage, None, None), TrainContext(None, None, None, None),
                   SearcherContext(length, None, None, missing_reason=reason), preempt, None, None)


def _in_container() -> bool:
    """Whether this task runs in a container-like sandbox (anything but the agent's plain
    ``local-process`` runtime), where a shared_fs host_path is mounted at its container_path."""
    return os.environ.get("DET_RESOURCES_TYPE", "local-process") not in ("", "local-process")


def init(*, max_length_off_cluster: int | None = None, max_length: int | None = None,
         checkpoint_dir: str | Path = "checkpoints", checkpoint_storage: str | dict | None = None,
         distributed: Any = None, preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> Context:
    """The core context. On the cluster: the task's info, metrics to the master, checkpoints to
    the experiment's ``checkpoint_storage`` (or ``checkpoint_storage=`` given here). Off it:
    metrics printed, checkpoints in ``checkpoint_dir`` (./checkpoints), and
    ``searcher.operations()`` yields one op of ``max_length_off_cluster`` (alias ``max_length``)."""
    if distributed is not None and getattr(distributed, "size", 1) > 1:
        raise NotImplementedError("this version runs one process per trial: distributed size must be 1")
    local_dir = Path(checkpoint_dir).resolve()
    info = get_cluster_info()
    if info is None:
        storage = storage_mod.from_config(checkpoint_storage, local_dir)
        return _off_cluster(None, storage, max_length_off_cluster or max_length, PreemptContext(None, None))
    session = Session(info.master_url, info.session_token)
    trial = info.trial
    if trial is None:  # a non-TRIAL task: real preemption, nothing else to report
        storage = storage_mod.from_config(checkpoint_storage, local_dir, in_container=_in_container())
        return _off_cluster(info, storage, None, PreemptContext(session, info.allocation_id))

    cfg_storage = trial.config.get("checkpoint_storage")
    storage_id = None
    try:
        started = session.post("/api/v1/runs/start", json={"runId": trial.trial_id, "checkpointStorage": cfg_storage})
        body = started.json() if started.content else {}
        storage_id = body.get("storageId") if isinstance(body, dict) else None
    except MasterError as e:
        if e.status != 404:
            session.close()
            raise
    storage = storage_mod.from_config(checkpoint_storage or cfg_storage, local_dir, in_container=_in_container())
    preempt = PreemptContext(session, info.allocation_id)
    shipper = MetricShipper(session.clone(), trial.trial_id)
    length = max_length_of(trial.config)
    return Context(
        info,
        CheckpointContext(storage, session, info, before_report=shipper.flush, storage_id=storage_id),
        TrainContext(shipper, session, trial.trial_id, trial.experiment_id, trial.trial_run_id),
        SearcherContext(length[0] if length else None, session, trial.trial_id, unit=length[1] if length else "",
                        missing_reason="searcher.max_length is not set in the experiment config, so there is "
                                       "no searcher operation to train for"),
        preempt, session, shipper,
    )
