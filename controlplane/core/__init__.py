"""The training-code API: ``from controlplane import core``; names and call shapes mirror
``determined.core`` so a Determined Core API script ports by changing its import.

    with core.init() as ctx:
        ctx.train.report_training_metrics(steps, {"loss": loss})
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, uuid): ...
        if ctx.preempt.should_preempt(): ...
"""

from controlplane.core._checkpoint import CheckpointContext, DownloadMode
from controlplane.core._context import Context, InvalidHP, TensorboardMode, init
from controlplane.core._distributed import DistributedContext, DummyDistributedContext
from controlplane.core._info import ClusterInfo, TrialInfo, get_cluster_info
from controlplane.core._preempt import PreemptContext, PreemptMode
from controlplane.core._searcher import SearcherContext, SearcherOperation
from controlplane.core._session import MasterError
from controlplane.core._train import EarlyExitReason, TrainContext

__all__ = ["CheckpointContext", "ClusterInfo", "Context", "DistributedContext", "DownloadMode",
           "DummyDistributedContext", "EarlyExitReason", "InvalidHP", "MasterError", "PreemptContext", "PreemptMode",
           "SearcherContext", "SearcherOperation", "TensorboardMode", "TrainContext", "TrialInfo", "get_cluster_info",
           "init"]
