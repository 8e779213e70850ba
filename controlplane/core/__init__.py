"""The training-code API: ``from controlplane import core``; names mirror ``determined.core``.

    with core.init() as ctx:
        ctx.train.report_training_metrics(steps, {"loss": loss})
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, uuid): ...
        if ctx.preempt.should_preempt(): ...
"""

from controlplane.core._checkpoint import CheckpointContext
from controlplane.core._context import Context, DistributedContext, init
from controlplane.core._info import ClusterInfo, TrialInfo, get_cluster_info
from controlplane.core._preempt import PreemptContext
from controlplane.core._searcher import SearcherContext, SearcherOperation
from controlplane.core._session import MasterError
from controlplane.core._train import TrainContext


class InvalidHP(Exception):
    """Raise inside ``with core.init()`` when the hyperparameters cannot work (reported as an early exit)."""


__all__ = ["CheckpointContext", "ClusterInfo", "Context", "DistributedContext", "InvalidHP", "MasterError",
           "PreemptContext", "SearcherContext", "SearcherOperation", "TrainContext", "TrialInfo",
           "get_cluster_info", "init"]
