"""``PyTorchTrialContext``: what a ``PyTorchTrial`` is built with (Determined's names).

``wrap_model`` moves the model to the device and, with several workers, wraps it in
``DistributedDataParallel`` (gradients averaged across workers in ``backward``);
``wrap_optimizer`` / ``wrap_lr_scheduler`` register what the trainer checkpoints and steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from controlplane import core
from controlplane.pytorch._data import to_device
from controlplane.pytorch._lr_scheduler import LRScheduler

log = logging.getLogger("controlplane.pytorch")


class _DistributedDataParallel(nn.parallel.DistributedDataParallel):
    """DDP that hands attribute lookups it does not know to the wrapped module (as Determined's)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def batch_sizes(hparams: dict[str, Any] | None, slots: int) -> tuple[int | None, int | None]:
    """(per-slot, global) batch size from the ``global_batch_size`` hyperparameter, as Determined:
    the global size is split evenly across the slots (and rounded down to a multiple of them)."""
    if not hparams or hparams.get("global_batch_size") is None:
        return None, None
    global_bs = hparams["global_batch_size"]
    if isinstance(global_bs, bool) or not isinstance(global_bs, int) or global_bs < 1:
        raise ValueError(f"the global_batch_size hyperparameter must be a positive integer, got {global_bs!r}")
    slots = max(1, slots)
    if global_bs < slots:
        raise ValueError(f"global_batch_size ({global_bs}) is smaller than the number of slots ({slots})")
    per_slot = global_bs // slots
    if global_bs % slots:
        log.warning("global_batch_size %d is not divisible by %d slots; using %d per slot (%d in all)",
                    global_bs, slots, per_slot, per_slot * slots)
    return per_slot, per_slot * slots


class PyTorchTrialContext:
    def __init__(self, core_context: core.Context, trial_seed: int | None = None, hparams: dict[str, Any] | None = None,
                 slots_per_trial: int | None = None, exp_conf: dict[str, Any] | None = None,
                 aggregation_frequency: int = 1,
                 steps_completed: int = 0, **_ignored: Any) -> None:
        self._core = core_context
        self.distributed = core_context.distributed
        if aggregation_frequency != 1:
            raise ValueError("optimizations.aggregation_frequency other than 1 is not supported in this version")
        self._hparams = hparams
        self._exp_conf = exp_conf
        self._trial_seed = trial_seed
        self._steps_completed = steps_completed
        slots = slots_per_trial if slots_per_trial is not None else self.distributed.size
        self._per_slot_batch_size, self._global_batch_size = batch_sizes(hparams, slots)
        self.device = self._init_device()
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._unwrapped: list[nn.Module] = []
        self._epoch_len: int | None = None
        self._current_batch_idx: int | None = None
        self._stop_requested = False
        self._warned: set[Any] = set()

    def _init_device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.distributed.local_rank % max(1, torch.cuda.device_count()))
        return torch.device("cpu")

    # ---- configuration -----------------------------------------------------------------------
    def get_hparams(self) -> dict[str, Any]:
        if self._hparams is None:
            raise ValueError("hparams is undefined in this trial: pass hparams= to pytorch.init()")
        return self._hparams

    def get_hparam(self, name: str) -> Any:
        hparams = self.get_hparams()
        if name not in hparams:
            raise ValueError(f"could not find {name!r} in the experiment hyperparameters; check the "
                             "'hyperparameters' section of the experiment config")
        return hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        if self._exp_conf is None:
            raise ValueError("exp_conf is undefined in this trial: pass exp_conf= to pytorch.init()")
        return self._exp_conf

    def get_data_config(self) -> dict[str, Any]:
        return dict(self.get_experiment_config().get("data") or {})

    def get_global_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError("global_batch_size is undefined: set the global_batch_size hyperparameter")
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        if self._per_slot_batch_size is None:
            raise ValueError("per_slot_batch_size is undefined: set the global_batch_size hyperparameter")
        return self._per_slot_batch_size

    def get_trial_seed(self) -> int:
        if self._trial_seed is None:
            raise ValueError("the trial seed is not set")
        return self._trial_seed

    def get_trial_id(self) -> int:
        info = self._core.info
        if info is None or info.trial is None:
            raise ValueError("there is no trial id off the cluster")
        return info.trial.trial_id

    def get_experiment_id(self) -> int:
        info = self._core.info
        if info is None or info.trial is None:
            raise ValueError("there is no experiment id off the cluster")
        return info.trial.experiment_id

    def get_initial_batch(self) -> int:
        return self._steps_completed

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the trainer to checkpoint and stop at the next reporting, validation or checkpoint point."""
        if not isinstance(stop_requested, bool):
            raise TypeError("stop_requested must be a bool")
        self._stop_requested = stop_requested

    def get_enable_tensorboard_logging(self) -> bool:
        return False

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Accepted for compatibility; this version writes no TensorBoard files."""

    # ---- what the trainer manages ------------------------------------------------------------
    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        self._unwrapped.append(model)
        wrapped: nn.Module = model
        if self.distributed.size > 1:
            if not torch.distributed.is_available() or not torch.distributed.is_initialized():
                raise RuntimeError("several workers but no torch.distributed process group: start the trial "
                                   "with python3 -m launchers.torch_distributed, or call "
                                   "torch.distributed.init_process_group() before pytorch.init()")
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = _DistributedDataParallel(model, device_ids=device_ids)
        self.models.append(wrapped)
        return wrapped

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int = 1,
                       fp16_compression: bool | None = None,
                       average_aggregated_gradients: bool | None = None) -> torch.optim.Optimizer:
        if backward_passes_per_step != 1:
            raise ValueError("backward_passes_per_step other than 1 is not supported in this version")
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler: Any, step_mode: LRScheduler.StepMode,
                          frequency: int = 1) -> Any:
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def to_device(self, data: Any) -> Any:
        return to_device(data, self.device, self._warned)

    def backward(self, loss: torch.Tensor, gradient: torch.Tensor | None = None, retain_graph: bool = False,
                 create_graph: bool = False) -> None:
        """``loss.backward()``; with several workers DDP averages the gradients across them."""
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Callable[[Iterator[Any]], None] | None = None,
                       auto_zero_grads: bool = True, scaler: Any = None) -> None:
        """One optimizer step (gradients clipped first by ``clip_grads(params)``), then zeroed."""
        params = [p for group in optimizer.param_groups for p in group.get("params", [])]
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(iter(params))
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()

    # ---- where training is -------------------------------------------------------------------
    def _require_training(self) -> tuple[int, int]:
        if self._current_batch_idx is None or self._epoch_len is None:
            raise RuntimeError("training has not started")
        return self._current_batch_idx, self._epoch_len

    def current_train_batch(self) -> int:
        return self._require_training()[0]

    def current_train_epoch(self) -> int:
        batch, epoch_len = self._require_training()
        return batch // epoch_len

    def is_epoch_start(self) -> bool:
        batch, epoch_len = self._require_training()
        return batch % epoch_len == 0

    def is_epoch_end(self) -> bool:
        batch, epoch_len = self._require_training()
        return batch % epoch_len == epoch_len - 1
