"""A PyTorchTrial on synthetic data (no download): a small MLP learns which of four directions
a random point lies along. Ported from Determined by changing one import
(``from determined import pytorch`` -> ``from controlplane import pytorch``).

Runs unchanged with one slot (``const.yaml``: the legacy ``model_def:SyntheticTrial`` entrypoint)
or several (``distributed.yaml``: ``python3 -m launchers.torch_distributed --trial ...``); the
data loaders are sharded per worker and DDP averages the gradients.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn

from controlplane import pytorch

FEATURES, CLASSES = 16, 4


def synthetic(n: int, seed: int) -> torch.utils.data.TensorDataset:
    """Points and their labels from a fixed teacher; the same on every worker and every run."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, FEATURES, generator=g)
    return torch.utils.data.TensorDataset(x, (x @ teacher).argmax(dim=1))


def weights_digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class WeightsLog(pytorch.PyTorchCallback):
    """Prints each worker's weight digest at checkpoints and at the end, to compare the workers."""

    def __init__(self, context: pytorch.PyTorchTrialContext, model: nn.Module) -> None:
        self.context, self.model = context, model

    def _print(self, when: str) -> None:
        try:
            batches = self.context.current_train_batch() + 1
        except RuntimeError:  # stopped before training
            batches = 0
        print(f"[weights] rank={self.context.distributed.rank} {when} batches={batches} "
              f"digest={weights_digest(self.model)}", flush=True)

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self._print("checkpoint")

    def on_trial_shutdown(self) -> None:
        self._print("end")


class SyntheticTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hidden = int(context.get_hparam("hidden"))
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(context.get_hparam("dropout")),
                                 nn.Linear(hidden, CLASSES))
        self.model = context.wrap_model(self.net)
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(context.get_hparam("lr")), momentum=0.9))
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=50, gamma=0.9),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH)
        self.loss = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(synthetic(int(self.context.get_data_config().get("train_size", 2048)), seed=1),
                                  batch_size=self.context.get_per_slot_batch_size(), shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(synthetic(512, seed=2), batch_size=self.context.get_per_slot_batch_size())

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"weights": WeightsLog(self.context, self.net)}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = self.loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "lr": self.scheduler.get_last_lr()[0]}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {"validation_loss": self.loss(logits, y), "accuracy": (logits.argmax(1) == y).float().mean()}
