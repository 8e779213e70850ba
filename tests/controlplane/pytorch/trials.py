"""Small PyTorchTrials for the tests, importable by spawned worker processes."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch
from torch import nn

from controlplane import pytorch


def dataset(n: int = 256, seed: int = 1) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, 3, generator=torch.Generator().manual_seed(99))
    return torch.utils.data.TensorDataset(x, (x @ w).argmax(1))


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode() + p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class Recorder(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.validations: list[dict] = []
        self.checkpoints: list[str] = []
        self.epochs_ended: list[int] = []
        self.rng_at_end: tuple = ()

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.validations.append(dict(metrics))

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.checkpoints.append(uuid)

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.epochs_ended.append(epoch_idx)

    def on_trial_shutdown(self) -> None:
        self.rng_at_end = (torch.random.get_rng_state().tolist(), np.random.get_state()[1].tolist(),
                           random.getstate())


class MLPTrial(pytorch.PyTorchTrial):
    """Uses every random stream (dropout: torch; noise: numpy and Python) so restores must be exact."""

    hook = None  # a test may set a callable(trial, batch_idx) run after each batch

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
        self.model = context.wrap_model(self.net)
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"),
                                                          momentum=0.9))
        self.sched = context.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(self.opt, step_size=7, gamma=0.8),
                                               pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH)
        self.recorder = Recorder()
        self.trained: list[int] = []
        self.records = int(context.get_hparams().get("records", 256))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(dataset(self.records), batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(dataset(96, seed=2), batch_size=16)

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"recorder": self.recorder}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        x = x + 0.01 * float(np.random.randn()) + 0.01 * random.random()
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self.trained.append(batch_idx)
        if MLPTrial.hook is not None:
            MLPTrial.hook(self, batch_idx)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {"validation_loss": nn.functional.cross_entropy(logits, y),
                "accuracy": (logits.argmax(1) == y).float().mean()}
