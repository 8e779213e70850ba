"""``PyTorchTrial`` and the loop that trains one (Determined's ``_PyTorchTrialController``, smaller).

Per batch, on every worker in step: ``train_batch`` on this worker's batch (DDP averages the
gradients), LR schedulers stepped, then at the boundaries that batch reaches (in this order):
training metrics averaged over the workers and reported by the chief, validation (every worker
evaluates its share; the chief reduces and reports), a checkpoint (the chief writes it), and
finally the chief's preemption answer, broadcast: a preempted or paused trial checkpoints at that
batch boundary and returns, so the process exits 0 and the next run resumes exactly there.

A checkpoint holds Determined's files: ``state_dict.pth`` (models, optimizers, LR schedulers,
callbacks, and the Python, NumPy and torch RNG states), ``trial_state.pkl`` (batches and epochs
trained, last validation and checkpoint) and ``load_data.json``. Resuming restores all of it and
skips the batches already trained, so the resumed run sees the same batches and random numbers as
a run that never stopped.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import pathlib
import pickle
import random
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from controlplane import core
from controlplane.pytorch import _user_code
from controlplane.pytorch._callback import PyTorchCallback
from controlplane.pytorch._data import DataLoader, data_length
from controlplane.pytorch._lr_scheduler import LRScheduler
from controlplane.pytorch._reducer import Reducer, reduce_batches, to_scalar
from controlplane.pytorch._units import Batch, Epoch, TrainUnit

if TYPE_CHECKING:
    from controlplane.pytorch._context import PyTorchTrialContext

log = logging.getLogger("controlplane.pytorch")
STATE_FILE = "state_dict.pth"
TRIAL_STATE_FILE = "trial_state.pkl"


class PyTorchTrial:
    """Subclass it: build models, optimizers and LR schedulers in ``__init__(context)`` through
    ``context.wrap_*``, and define ``train_batch``, the two ``build_*_data_loader`` methods and
    ``evaluate_batch`` (or ``evaluate_full_dataset``)."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> torch.Tensor | dict[str, Any]:
        """Train on one batch; return the loss or a dict of metrics."""
        raise NotImplementedError("a PyTorchTrial must define train_batch()")

    def build_training_data_loader(self) -> DataLoader:
        raise NotImplementedError("a PyTorchTrial must define build_training_data_loader()")

    def build_validation_data_loader(self) -> DataLoader:
        raise NotImplementedError("a PyTorchTrial must define build_validation_data_loader()")

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch; reduced over all batches by ``evaluation_reducer()``."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        return Reducer.AVG

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader[Any]) -> dict[str, Any]:
        """Metrics of the whole validation set, computed on the chief (instead of evaluate_batch)."""
        raise NotImplementedError

    def get_batch_length(self, batch: Any) -> int:
        return data_length(batch)


class _ShouldExit(Exception):  # Determined's name
    pass


@dataclass
class _TrialState:
    trial_id: int = 0
    last_ckpt: int = 0
    step_id: int = 0
    last_val: int = 0
    batches_trained: int = 0
    epochs_trained: int = 0


def _overrides(trial: PyTorchTrial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(PyTorchTrial, name)


def _plain_metrics(metrics: Any, what: str) -> dict[str, Any]:
    if isinstance(metrics, torch.Tensor):
        metrics = {"loss": metrics}
    if not isinstance(metrics, dict):
        raise TypeError(f"{what} must return a dict of metrics (or a loss tensor), got {type(metrics).__name__}")
    return {str(k): to_scalar(v) for k, v in metrics.items()}


def _mean(values: list[Any]) -> Any:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return math.fsum(nums) / len(nums) if nums and len(nums) == len(values) else values[-1]


def _strip_module_prefix(state: dict[str, Any]) -> dict[str, Any]:
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


class _Controller:
    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext, *, max_length: TrainUnit,
                 checkpoint_period: TrainUnit, validation_period: TrainUnit, reporting_period: TrainUnit,
                 checkpoint_policy: str, latest_checkpoint: str | None, step_zero_validation: bool, test_mode: bool,
                 searcher_metric: str | None, smaller_is_better: bool, trial_id: int, seed: int,
                 records_per_epoch: int | None) -> None:
        if not isinstance(trial, PyTorchTrial):
            raise TypeError(f"the trainer needs a PyTorchTrial, got {type(trial).__name__}")
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(f"checkpoint_policy must be best, all or none, got {checkpoint_policy!r}")
        if not context.models:
            raise ValueError("the trial wrapped no model: call context.wrap_model() in its __init__")
        if not context.optimizers:
            raise ValueError("the trial wrapped no optimizer: call context.wrap_optimizer() in its __init__")
        if _overrides(trial, "evaluate_batch") == _overrides(trial, "evaluate_full_dataset"):
            raise ValueError("define exactly one of evaluate_batch() and evaluate_full_dataset()")
        self.trial = trial
        self.context = context
        self.core = context._core
        self.dist = context.distributed
        self.is_chief = self.dist.rank == 0
        self.max_length = Batch(1) if test_mode else max_length
        self.checkpoint_period = checkpoint_period
        self.validation_period = validation_period
        self.reporting_period = reporting_period
        self.checkpoint_policy = checkpoint_policy
        self.latest_checkpoint = latest_checkpoint
        self.step_zero_validation = step_zero_validation
        self.test_mode = test_mode
        self.searcher_metric = searcher_metric
        self.smaller_is_better = smaller_is_better
        self.trial_id = trial_id
        self.seed = seed
        self.records_per_epoch = records_per_epoch
        self.callbacks = trial.build_callbacks()
        self.state = _TrialState(trial_id=trial_id)
        self._pending: list[dict[str, Any]] = []

    # ---- the run -----------------------------------------------------------------------------
    def run(self) -> None:
        for cb in self.callbacks.values():
            cb.on_trial_startup(self.context.get_initial_batch(), self.latest_checkpoint)
        try:
            train_data = self.trial.build_training_data_loader()
            validation_data = self.trial.build_validation_data_loader()
            rng_state = self._restore() if self.latest_checkpoint else None
            self._set_data_loaders(train_data, validation_data)
            if rng_state is not None:  # last, so nothing above shifts the random streams
                self._set_rng_state(rng_state)
            for cb in self.callbacks.values():
                cb.on_training_start()
            try:
                self._train()
            except _ShouldExit:
                if not self._checkpoint_is_current():
                    self._checkpoint()
            except core.InvalidHP:
                if not self._checkpoint_is_current():
                    self._checkpoint()
                raise
        finally:
            for cb in self.callbacks.values():
                cb.on_trial_shutdown()

    def _set_data_loaders(self, train_data: Any, validation_data: Any) -> None:
        n, rank = self.dist.size, self.dist.rank
        if not isinstance(train_data, DataLoader):
            raise TypeError("build_training_data_loader() must return a controlplane.pytorch.DataLoader (it "
                            f"shards, repeats and resumes the data), got {type(train_data).__name__}")
        self.training_loader = train_data.get_data_loader(repeat=True, skip=self.state.batches_trained,
                                                          num_replicas=n, rank=rank, seed=self.seed)
        if self.records_per_epoch:
            global_bs = self.context._global_batch_size
            if not global_bs:
                raise ValueError("records_per_epoch needs the global_batch_size hyperparameter")
            epoch_len = max(1, self.records_per_epoch // global_bs)
        else:
            epoch_len = len(self.training_loader.batch_sampler)  # type: ignore[arg-type]
        self.epoch_len = int(self.dist.broadcast(epoch_len))  # every worker uses the chief's epochs
        if self.epoch_len < 1:
            raise ValueError("the training data loader has no batches for this worker")
        self.context._epoch_len = self.epoch_len
        self.validation_loader: torch.utils.data.DataLoader[Any] | None = None
        batch_eval = _overrides(self.trial, "evaluate_batch")
        if batch_eval or self.is_chief:
            if isinstance(validation_data, DataLoader):
                self.validation_loader = validation_data.get_data_loader(
                    num_replicas=n if batch_eval else 1, rank=rank if batch_eval else 0, seed=self.seed)
            elif isinstance(validation_data, torch.utils.data.DataLoader) and n == 1:
                self.validation_loader = validation_data
            else:
                raise TypeError("build_validation_data_loader() must return a controlplane.pytorch.DataLoader, "
                                f"got {type(validation_data).__name__}")
        self._train_iter = iter(self.training_loader)

    def _done(self) -> bool:
        if isinstance(self.max_length, Epoch):
            assert isinstance(self.max_length.value, int)
            return self.state.epochs_trained >= self.max_length.value
        assert isinstance(self.max_length.value, int)
        return self.state.batches_trained >= self.max_length.value

    def _progress(self) -> float:
        assert isinstance(self.max_length.value, int)
        total = self.max_length.value * (self.epoch_len if isinstance(self.max_length, Epoch) else 1)
        return min(1.0, self.state.batches_trained / total) if total > 0 else 1.0

    def _reached(self, unit: TrainUnit, epoch_end: bool) -> bool:
        if isinstance(unit, Epoch):
            return epoch_end and unit.should_stop(self.state.epochs_trained)
        return unit.should_stop(self.state.batches_trained)

    def _train(self) -> None:
        state = self.state
        if self.step_zero_validation and state.batches_trained == 0 and state.last_val == 0:
            self._validate()
        for model in self.context.models:
            model.train()
        while not self._done():
            batch_idx = state.batches_trained
            epoch_idx, in_epoch = divmod(batch_idx, self.epoch_len)
            if in_epoch == 0:
                for cb in self.callbacks.values():
                    cb.on_training_epoch_start(epoch_idx)
            self.context._current_batch_idx = batch_idx
            batch = self.context.to_device(next(self._train_iter))
            metrics = _plain_metrics(self.trial.train_batch(batch=batch, epoch_idx=epoch_idx, batch_idx=batch_idx),
                                     "train_batch()")
            state.batches_trained += 1
            epoch_end = state.batches_trained % self.epoch_len == 0
            self._step_lr_schedulers(batch_idx, epoch_end)
            if epoch_end:
                state.epochs_trained += 1
                for cb in self.callbacks.values():
                    cb.on_training_epoch_end(epoch_idx)
            self._pending.append(metrics)
            done = self._done()
            boundary = False
            if done or self._reached(self.reporting_period, epoch_end):
                self._report_training()
                boundary = True
            if (done or self._reached(self.validation_period, epoch_end)) and not self._validation_is_current():
                self._validate()
                boundary = True
            if (done or self._reached(self.checkpoint_period, epoch_end)) and not self._checkpoint_is_current():
                self._checkpoint()
                boundary = True
            if boundary and any(self.dist.allgather(self.context.get_stop_requested())):
                raise _ShouldExit
            if self.core.preempt.should_preempt():
                log.info("preempted at batch %d: checkpointing and exiting", state.batches_trained)
                raise _ShouldExit

    def _step_lr_schedulers(self, batch_idx: int, epoch_end: bool) -> None:
        for sched in self.context.lr_schedulers:
            mode = sched._step_mode
            if mode in (LRScheduler.StepMode.STEP_EVERY_BATCH, LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP):
                if (batch_idx + 1) % sched._frequency == 0:
                    sched.step()
            elif mode == LRScheduler.StepMode.STEP_EVERY_EPOCH and epoch_end:
                if (self.state.epochs_trained + 1) % sched._frequency == 0:
                    sched.step()

    # ---- metrics -----------------------------------------------------------------------------
    def _report_training(self) -> None:
        pending, self._pending = self._pending, []
        if self.dist.size > 1:
            gathered = self.dist.gather(pending)
            if gathered is not None:  # per batch, the average over the workers
                pending = [{k: _mean([w[i][k] for w in gathered if i < len(w) and k in w[i]]) for k in b}
                           for i, b in enumerate(gathered[0])]
        avg: dict[str, Any] = {}
        if self.is_chief:
            keys = [k for b in pending for k in b]
            avg = {k: _mean([b[k] for b in pending if k in b]) for k in dict.fromkeys(keys)}
            avg.setdefault("batches", self.state.batches_trained)
            avg.setdefault("epochs", self.state.epochs_trained)
            self.core.train.report_training_metrics(steps_completed=self.state.batches_trained, metrics=avg)
            self.core.train.report_progress(self._progress())
        if any(type(cb).on_training_workload_end is not PyTorchCallback.on_training_workload_end
               for cb in self.callbacks.values()):
            avg = self.dist.broadcast(avg)
            for cb in self.callbacks.values():
                cb.on_training_workload_end(avg_metrics=avg, batch_metrics=pending if self.is_chief else [])

    @torch.no_grad()
    def _validate(self) -> dict[str, Any]:
        started = time.monotonic()
        for model in self.context.models:
            model.eval()
        for cb in self.callbacks.values():
            cb.on_validation_start()
        metrics: dict[str, Any] = {}
        num_inputs = 0
        if _overrides(self.trial, "evaluate_batch"):
            assert self.validation_loader is not None
            takes_idx = "batch_idx" in inspect.signature(self.trial.evaluate_batch).parameters
            batches: list[dict[str, Any]] = []
            for idx, batch in enumerate(self.validation_loader):
                batch = self.context.to_device(batch)
                num_inputs += self.trial.get_batch_length(batch)
                out = (self.trial.evaluate_batch(batch=batch, batch_idx=idx) if takes_idx
                       else self.trial.evaluate_batch(batch=batch))  # type: ignore[call-arg]
                batches.append(_plain_metrics(out, "evaluate_batch()"))
                if self.test_mode:
                    break
            gathered = self.dist.gather(batches)
            if gathered is not None:
                flat = [b for worker in gathered for b in worker]
                if not flat:
                    raise RuntimeError("the validation data loader is empty")
                metrics = reduce_batches(flat, self.trial.evaluation_reducer())
        elif self.is_chief:
            assert self.validation_loader is not None
            metrics = _plain_metrics(self.trial.evaluate_full_dataset(data_loader=self.validation_loader),
                                     "evaluate_full_dataset()")
        if self.is_chief:
            metrics.setdefault("batches", self.state.batches_trained)
            metrics.setdefault("epochs", self.state.epochs_trained)
        metrics = self.dist.broadcast(metrics)
        for model in self.context.models:
            model.train()
        self.state.last_val = self.state.batches_trained
        should_checkpoint = False
        if self.is_chief:
            best_before = self.core.train.get_experiment_best_validation()
            self.core.train.report_validation_metrics(steps_completed=self.state.batches_trained, metrics=metrics)
            log.info("validated at batch %d in %.1fs: %s", self.state.batches_trained, time.monotonic() - started,
                     {k: v for k, v in metrics.items() if k not in ("batches", "epochs")})
            if self.checkpoint_policy == "all":
                should_checkpoint = True
            elif self.checkpoint_policy == "best":
                value = self._searcher_value(metrics)
                should_checkpoint = best_before is None or (
                    value < best_before if self.smaller_is_better else value > best_before)
        for cb in self.callbacks.values():
            cb.on_validation_end(metrics)
        if self.dist.broadcast(should_checkpoint) and not self._checkpoint_is_current():
            self._checkpoint()
        return metrics

    def _searcher_value(self, metrics: dict[str, Any]) -> float:
        name = self.searcher_metric
        if not name or name not in metrics:
            raise RuntimeError(f"the searcher uses metric {name!r} but the trial's validation returned "
                               f"{sorted(k for k in metrics if k not in ('batches', 'epochs'))}")
        value = metrics[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RuntimeError(f"the searcher metric {name!r} must be a number, got {value!r}")
        return float(value)

    def _validation_is_current(self) -> bool:
        return self.state.last_val == self.state.batches_trained

    def _checkpoint_is_current(self) -> bool:
        return self.state.last_ckpt == self.state.batches_trained

    # ---- checkpoints -------------------------------------------------------------------------
    def _checkpoint(self) -> None:
        self.state.last_ckpt = self.state.batches_trained
        uuid = ""
        if self.is_chief:
            metadata = {"steps_completed": self.state.batches_trained, "framework": f"torch-{torch.__version__}",
                        "format": "pickle"}
            with self.core.checkpoint.store_path(metadata) as (path, storage_id):
                self._save(pathlib.Path(path))
                uuid = storage_id
            log.info("checkpoint %s at batch %d", uuid, self.state.batches_trained)
        uuid = str(self.dist.broadcast(uuid))
        for cb in self.callbacks.values():
            cb.on_checkpoint_upload_end(uuid=uuid)

    def _save(self, path: pathlib.Path) -> None:
        np_state: Any = np.random.get_state()
        rng_state: dict[str, Any] = {
            "cpu_rng_state": torch.random.get_rng_state(),
            "np_rng_state": [np_state[0], np_state[1].tolist(), *np_state[2:]],
            "random_rng_state": random.getstate(),
        }
        if torch.cuda.is_available():
            rng_state["gpu_rng_state"] = torch.cuda.get_rng_state(self.context.device)
        torch.save({
            "models_state_dict": [m.state_dict() for m in self.context._unwrapped],
            "optimizers_state_dict": [o.state_dict() for o in self.context.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in self.context.lr_schedulers],
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "rng_state": rng_state,
        }, path / STATE_FILE)
        with (path / TRIAL_STATE_FILE).open("wb") as f:
            pickle.dump(asdict(self.state), f)
        trial_cls = type(self.trial)
        (path / "load_data.json").write_text(json.dumps({
            "trial_type": "PyTorchTrial", "experiment_config": self.context._exp_conf,
            "hparams": self.context._hparams, "trial_cls_spec": f"{trial_cls.__module__}:{trial_cls.__qualname__}",
            "is_trainer": True}, default=str))
        _user_code.write_user_code(path)
        for cb in self.callbacks.values():
            cb.on_checkpoint_write_end(str(path))

    def _restore(self) -> dict[str, Any] | None:
        """Loads everything but the RNG states, which are returned to be set last."""
        assert self.latest_checkpoint is not None
        log.info("restoring the trial from checkpoint %s", self.latest_checkpoint)
        with self.core.checkpoint.restore_path(self.latest_checkpoint) as path:
            path = pathlib.Path(path)
            ckpt_file = next((p for p in (path / STATE_FILE, path / "determined" / STATE_FILE, path / "checkpoint.pt")
                              if p.exists()), None)
            if ckpt_file is None:
                raise FileNotFoundError(f"checkpoint {self.latest_checkpoint} has no {STATE_FILE}")
            ckpt = torch.load(ckpt_file, map_location="cpu", weights_only=True)
            trial_state = None
            if (path / TRIAL_STATE_FILE).exists():
                with (path / TRIAL_STATE_FILE).open("rb") as f:
                    trial_state = pickle.load(f)  # this trial's own checkpoint
        models = ckpt.get("models_state_dict") or ([ckpt["model_state_dict"]] if "model_state_dict" in ckpt else [])
        if len(models) != len(self.context._unwrapped):
            raise ValueError(f"checkpoint {self.latest_checkpoint} holds {len(models)} models, the trial wraps "
                             f"{len(self.context._unwrapped)}")
        for model, state in zip(self.context._unwrapped, models, strict=True):
            model.load_state_dict(_strip_module_prefix(state))
        optimizers = ckpt.get("optimizers_state_dict") or (
            [ckpt["optimizer_state_dict"]] if "optimizer_state_dict" in ckpt else [])
        for opt, state in zip(self.context.optimizers, optimizers, strict=False):
            opt.load_state_dict(state)
        schedulers = ckpt.get("lr_schedulers_state_dict") or ([ckpt["lr_scheduler"]] if "lr_scheduler" in ckpt else [])
        for sched, state in zip(self.context.lr_schedulers, schedulers, strict=False):
            sched.load_state_dict(state)
        for name, cb_state in (ckpt.get("callbacks") or {}).items():
            if name in self.callbacks:
                self.callbacks[name].load_state_dict(cb_state)
        if isinstance(trial_state, dict) and trial_state.get("trial_id") == self.trial_id:
            known = {k: int(v) for k, v in trial_state.items() if k in _TrialState.__dataclass_fields__}
            self.state = _TrialState(**known)
        else:  # another trial's checkpoint: its weights, a fresh count
            self.state = _TrialState(trial_id=self.trial_id)
        return ckpt.get("rng_state")

    def _set_rng_state(self, rng_state: dict[str, Any]) -> None:
        np_state = rng_state["np_rng_state"]
        np.random.set_state((np_state[0], np.array(np_state[1], dtype=np.uint32), *np_state[2:]))
        py_state = rng_state["random_rng_state"]
        random.setstate((py_state[0], tuple(py_state[1]), py_state[2]))
        torch.random.set_rng_state(rng_state["cpu_rng_state"])
        if torch.cuda.is_available() and "gpu_rng_state" in rng_state:
            torch.cuda.set_rng_state(rng_state["gpu_rng_state"], self.context.device)
