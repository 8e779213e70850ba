"""core.init(): the one entry point training code calls, on the cluster or off it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from controlplane.core import storage as storage_mod
from controlplane.core._checkpoint import CheckpointContext
from controlplane.core._info import ClusterInfo, get_cluster_info
from controlplane.core._metrics import MetricShipper
from controlplane.core._preempt import PreemptContext
from controlplane.core._searcher import SearcherContext
from controlplane.core._searcher import max_length as max_length_of
from controlplane.core._session import MasterError, Session
from controlplane.core._train import TrainContext

log = logging.getLogger("controlplane.core")


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

    def broadcast(self, obj):  # noqa: ANN001, ANN201
        return obj

    def allgather(self, obj) -> list:  # noqa: ANN001
        return [obj]

    def gather(self, obj) -> list:  # noqa: ANN001
        return [obj]


class Context:
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

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.close()

    def close(self) -> None:
        """Flushes every metric report; until this returns, reports may still be in flight."""
        self.preempt.close()
        if self._shipper is not None:
            self._shipper.close()
        if self._session is not None:
            self._session.close()


def init(*, max_length: int | None = None, checkpoint_dir: str | Path = "checkpoints") -> Context:
    """On the cluster: the task's info, metrics to the master, checkpoints to the experiment's
    storage. Off it: metrics are printed and checkpoints kept in ``checkpoint_dir``."""
    info = get_cluster_info()
    if info is None or info.trial is None:
        return Context(None, CheckpointContext(storage_mod.LocalDirectoryStorage(Path(checkpoint_dir)), None, None),
                       TrainContext(None, None, None, None), SearcherContext(max_length, None, None),
                       PreemptContext(None, None), None, None)
    trial = info.trial
    session = Session(info.master_url, info.session_token)
    try:
        session.post("/api/v1/runs/start", json={"runId": trial.trial_id,
                                                 "checkpointStorage": trial.config.get("checkpoint_storage")})
    except MasterError as e:
        if e.status != 404:
            raise
    shipper = MetricShipper(session, trial.trial_id)
    storage = storage_mod.from_config(trial.config.get("checkpoint_storage"), Path(checkpoint_dir))
    try:
        length = max_length_of(trial.config)
    except RuntimeError:
        length = None
    return Context(
        info,
        CheckpointContext(storage, session, info, before_report=shipper.flush),
        TrainContext(shipper, session, trial.trial_id, trial.experiment_id, trial.trial_run_id),
        SearcherContext(length, session, trial.trial_id),
        PreemptContext(session, info.allocation_id),
        session, shipper,
    )

