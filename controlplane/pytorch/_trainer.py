"""``pytorch.init()`` and ``pytorch.Trainer``: train a ``PyTorchTrial`` from a script, on the cluster
or off it (Determined's Trainer API)::

    with pytorch.init(hparams=...) as context:
        trial = MyTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Epoch(1))

Under a launcher with several workers (``WORLD_SIZE`` > 1) ``init()`` joins the torch process group
(gloo on CPU, NCCL with GPUs) and builds the core ``DistributedContext`` from the launcher's
environment. Seeds: the trial seed is applied to Python, NumPy and torch on every worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from controlplane import core
from controlplane.config.stored import searcher_of
from controlplane.core._searcher import max_length as searcher_max_length
from controlplane.pytorch import _user_code
from controlplane.pytorch._context import PyTorchTrialContext
from controlplane.pytorch._trial import PyTorchTrial, _Controller
from controlplane.pytorch._units import Batch, Epoch, TrainUnit

log = logging.getLogger("controlplane.pytorch")


def _set_random_seeds(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.random.manual_seed(seed)


def _initialize_distributed_backend() -> core.DistributedContext | None:
    """The process group and DistributedContext of a launcher's worker; None for a single process."""
    world = int(os.environ.get("WORLD_SIZE") or 1)
    info = core.get_cluster_info()
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        return core.DistributedContext.from_torch_distributed()
    if info is not None and info.trial is not None and (len(info.container_addrs) > 1 or len(info.slot_ids) > 1):
        raise ValueError(f"this trial has {len(info.slot_ids)} slots: train it under a launcher, e.g. "
                         "entrypoint: python3 -m launchers.torch_distributed --trial model_def:MyTrial")
    return None


@contextlib.contextmanager
def init(*, hparams: dict[str, Any] | None = None, exp_conf: dict[str, Any] | None = None,
         distributed: core.DistributedContext | None = None, aggregation_frequency: int = 1,
         enable_tensorboard_logging: bool = True, checkpoint_dir: str | None = None) -> Iterator[PyTorchTrialContext]:
    """A ``PyTorchTrialContext`` (and the core context under it) for the duration of the block.
    On the cluster hparams and the config come from the trial; off it from the arguments."""
    info = core.get_cluster_info()
    on_cluster = info is not None and info.trial is not None
    _user_code.remember(on_cluster)  # the context's files, before training writes into the working directory
    created_group = False
    if distributed is None:
        import torch.distributed as dist

        had_group = dist.is_available() and dist.is_initialized()
        distributed = _initialize_distributed_backend()
        created_group = distributed is not None and not had_group
    trial_seed: int | None = None
    steps_completed = 0
    if on_cluster:
        assert info is not None and info.trial is not None
        trial_seed = info.trial.trial_seed
        hparams = info.trial.hparams if hparams is None else hparams
        exp_conf = info.trial.config
        steps_completed = info.trial.steps_completed
    elif exp_conf is not None:
        seed = (exp_conf.get("reproducibility") or {}).get("experiment_seed")
        trial_seed = int(seed) if isinstance(seed, int) else None
    if trial_seed is not None:
        _set_random_seeds(trial_seed)
    kwargs: dict[str, Any] = {"checkpoint_dir": checkpoint_dir} if checkpoint_dir else {}
    try:
        with core.init(distributed=distributed, preempt_mode=core.PreemptMode.WorkersAskChief,
                       tensorboard_mode=core.TensorboardMode.MANUAL, **kwargs) as core_context:
            yield PyTorchTrialContext(core_context, trial_seed=trial_seed, hparams=hparams,
                                      slots_per_trial=core_context.distributed.size, exp_conf=exp_conf,
                                      aggregation_frequency=aggregation_frequency, steps_completed=steps_completed)
    finally:
        if created_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _max_length_from_config(config: dict[str, Any], global_batch_size: int | None) -> TrainUnit | None:
    """``searcher.max_length`` ({unit: n} or an int in ``searcher.unit``), or adaptive ASHA's
    ``max_time`` in ``time_metric`` batches/records/epochs."""
    length = searcher_max_length(config)
    searcher = config.get("searcher") or {}
    if length is None and searcher.get("max_time") is not None and searcher.get("time_metric") in (
            "batches", "records", "epochs"):
        length = (int(searcher["max_time"]), str(searcher["time_metric"]))
    if length is None:
        return None
    n, unit = length
    if unit not in ("batches", "records", "epochs"):
        raise ValueError(f"searcher length unit {unit!r} is not one of batches, records, epochs")
    return TrainUnit._from_values(**{unit: n}, global_batch_size=global_batch_size)


class Trainer:
    """Trains a ``PyTorchTrial``: ``fit()`` runs the loop with checkpoints, validation and reports."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context
        self._core = context._core
        self._info = self._core.info
        self._local_training = self._info is None or self._info.trial is None

    def fit(self, checkpoint_period: TrainUnit | None = None, validation_period: TrainUnit | None = None,
            max_length: TrainUnit | None = None, reporting_period: TrainUnit | None = None,
            checkpoint_policy: str = "best", latest_checkpoint: str | None = None, step_zero_validation: bool = False,
            test_mode: bool = False, profiling_enabled: bool = False) -> None:
        """Train to ``max_length`` (on the cluster, ``searcher.max_length`` when not given), validating
        every ``validation_period`` and checkpointing every ``checkpoint_period`` and at the end;
        metrics reported every ``reporting_period`` (100 batches). ``latest_checkpoint`` resumes."""
        checkpoint_period = checkpoint_period or Batch(sys.maxsize)
        validation_period = validation_period or Batch(sys.maxsize)
        reporting_period = reporting_period or Batch(100)
        searcher_metric: str | None = None
        smaller_is_better = True
        trial_id = 0
        if self._local_training:
            if checkpoint_policy == "best":
                log.info("checkpoint_policy 'best' needs the cluster's searcher; using 'all' off the cluster")
                checkpoint_policy = "all"
            if max_length is None:
                raise ValueError("max_length must be given off the cluster, e.g. fit(max_length=pytorch.Batch(100))")
        else:
            if test_mode:
                raise ValueError("test_mode is only supported off the cluster")
            assert self._info is not None and self._info.trial is not None
            config = self._info.trial.config
            searcher = searcher_of(config)
            searcher_metric = searcher.metric or None
            smaller_is_better = searcher.smaller_is_better
            trial_id = self._info.trial.trial_id
            if latest_checkpoint is None and self._info.latest_checkpoint is not None:
                log.warning("fit() was not given latest_checkpoint: this run will not resume from %s; pass "
                            "fit(latest_checkpoint=info.latest_checkpoint)", self._info.latest_checkpoint)
            if max_length is None:
                max_length = _max_length_from_config(config, self._context._global_batch_size)
            if max_length is None:
                raise ValueError("fit(max_length=...) must be given, or searcher.max_length set in the config")
        if not isinstance(max_length, (Batch, Epoch)) or not isinstance(max_length.value, int):
            raise TypeError("max_length must be pytorch.Batch(int) or pytorch.Epoch(int)")
        seed = self._context._trial_seed if self._context._trial_seed is not None else 0
        records_per_epoch = None
        if self._context._exp_conf:
            rpe = self._context._exp_conf.get("records_per_epoch")
            records_per_epoch = int(rpe) if isinstance(rpe, int) and rpe > 0 else None
        controller = _Controller(
            self._trial, self._context, max_length=max_length, checkpoint_period=checkpoint_period,
            validation_period=validation_period, reporting_period=reporting_period,
            checkpoint_policy=checkpoint_policy, latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation, test_mode=test_mode, searcher_metric=searcher_metric,
            smaller_is_better=smaller_is_better, trial_id=trial_id, seed=seed, records_per_epoch=records_per_epoch)
        controller.run()
