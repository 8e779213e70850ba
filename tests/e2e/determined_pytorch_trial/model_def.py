"""A PyTorchTrial written against Determined's own ``determined.pytorch`` (0.38.1), nothing else.

It fits y = 3x + 1 with one linear layer. Each worker also reports the world size it trained in,
so the metrics the master stores show that two workers really ran: averaged over workers by the
harness, ``world_size`` reads 2.
"""

import torch
from determined import pytorch
from torch import nn


def _points() -> torch.utils.data.TensorDataset:
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, 3 * x + 1)


class RegressionTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr")))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_points(), batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_points(), batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch, epoch_idx: int, batch_idx: int) -> dict:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "world_size": float(self.context.distributed.get_size())}

    def evaluate_batch(self, batch) -> dict:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}
