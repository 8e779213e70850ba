"""The workloads the checks submit: Determined's own files, byte for byte (the Core API tutorial 0 and
``examples/tutorials/mnist_pytorch``; tutorials 1-4 are read from tests/e2e/determined_tutorials),
our synthetic MNIST data loader and sleeper trial, and the contexts and configs made of them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from benchmarks.determined_client.settings import ENVIRONMENT, TUTORIALS

# --- Determined's own files (v0.38.1, commit 6bcda5dd3426ce682ea54e2b55115aa9478dbe0e; Apache-2.0) ---

TUTORIAL_0_PY = '''"""
Let's pretend our goal is to increment an integer over and over.  It'll be fun.

Stage 0 is intended to look like a completely unmodified "training" script.
Presumably you already have your own training script, that's a lot more complex
than this.  By following these examples you can get an idea of how to modify
your own script to integrate with the Core API.
"""

import logging
import sys
import time


def main(increment_by):
    x = 0
    for batch in range(100):
        x += increment_by
        time.sleep(0.1)
        print(f"x is now {x}")


if __name__ == "__main__":
    main(increment_by=1)
'''

TUTORIAL_0_YAML = """name: core-api-stage-0
entrypoint: python3 0_start.py

# Use the single-searcher to run just one instance of the training script
searcher:
   name: single
   # metric is required but it shouldn't hurt to ignore it at this point.
   metric: x

max_restarts: 0
"""

MNIST_TRAIN_PY = '''"""
This example shows how to interact with the Determined PyTorch training APIs to
build a basic MNIST network.

In the `__init__` method, the model and optimizer are wrapped with `wrap_model`
and `wrap_optimizer`. This model is single-input and single-output.

The methods `train_batch` and `evaluate_batch` define the forward pass
for training and evaluation respectively.

Then, configure and run the training loop with the PyTorch Trainer API.
The model can be trained either locally or on-cluster with the same training code.

"""
import argparse
import logging
import pathlib
from typing import Any, Dict

import data
import model
import torch
from ruamel import yaml
from torch import nn

import determined as det
from determined import pytorch


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: Dict) -> None:
        self.context = context

        # Trial-level constants.
        self.data_dir = pathlib.Path("data")
        self.batch_size = 64
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()

        # Define loss function.
        self.loss_fn = nn.NLLLoss()

        # Define model.
        self.model = self.context.wrap_model(model.build_model(hparams=hparams))

        # Configure optimizer.
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"])
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(self.data_dir, train=True)
        return pytorch.DataLoader(train_data, batch_size=self.per_slot_batch_size)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(self.data_dir, train=False)
        return pytorch.DataLoader(validation_data, batch_size=self.per_slot_batch_size)

    def train_batch(
        self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int
    ) -> Dict[str, torch.Tensor]:
        batch_data, labels = batch

        output = self.model(batch_data)
        loss = self.loss_fn(output, labels)

        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)

        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> Dict[str, Any]:
        batch_data, labels = batch

        output = self.model(batch_data)
        validation_loss = self.loss_fn(output, labels).item()

        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(batch_data)

        return {
            "validation_loss": validation_loss,
            "accuracy": accuracy,
        }


def run(max_length, local: bool = False):
    """Initializes the trial and runs the training loop.

    This method configures the appropriate training parameters for both local and on-cluster
    training modes. It is an example of a standalone training script that can run both locally and
    on-cluster without any code changes.

    To run the training code solely locally or on-cluster, remove the conditional parameter logic
    for the unneeded training mode.

    Arguments:
        local: Whether to run this script locally. Defaults to false (on-cluster training).
    """

    info = det.get_cluster_info()

    if local:
        # For convenience, use hparams from const.yaml for local mode.
        yml = yaml.YAML(typ="safe", pure=True)
        conf = yml.load(pathlib.Path("./const.yaml").read_text())
        hparams = conf["hyperparameters"]
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams  # Get instance of hparam values from Determined cluster info.
        latest_checkpoint = (
            info.latest_checkpoint
        )  # (Optional) Configure checkpoint for pause/resume functionality.

    with pytorch.init() as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=max_length,
            latest_checkpoint=latest_checkpoint,
            validation_period=pytorch.Batch(100),
        )


if __name__ == "__main__":
    # Configure logging
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    # Parse command line options
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    if args.batches:
        max_length = pytorch.Batch(args.batches)
    elif args.epochs:
        max_length = pytorch.Epoch(args.epochs)
    else:
        # default training length
        max_length = pytorch.Batch(100)

    local_training = det.get_cluster_info() is None
    run(max_length, local=local_training)
'''

MNIST_MODEL_PY = '''from typing import Any, Dict

import torch
from torch import nn

from determined import pytorch


class Flatten(nn.Module):
    def forward(self, *args: pytorch.TorchData, **kwargs: Any) -> torch.Tensor:
        assert len(args) == 1
        x = args[0]
        assert isinstance(x, torch.Tensor)
        return x.contiguous().view(x.size(0), -1)


def build_model(hparams: Dict) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(
            hparams["n_filters1"],
            hparams["n_filters2"],
            3,
        ),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout2d(hparams["dropout1"]),
        Flatten(),
        nn.Linear(144 * hparams["n_filters2"], 128),
        nn.ReLU(),
        nn.Dropout2d(hparams["dropout2"]),
        nn.Linear(128, 10),
        nn.LogSoftmax(),
    )
'''

MNIST_CONST_YAML = """name: mnist_pytorch_const
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
entrypoint: python3 train.py --epochs 1
"""

MNIST_DISTRIBUTED_YAML = """name: mnist_pytorch_distributed
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
resources:
  slots_per_trial: 8
entrypoint: >-
  python3 -m determined.launch.torch_distributed
  python3 train.py --epochs 1
"""

# Ours: the one file changed. MNIST's shapes (1x28x28 images, 10 classes) without torchvision or a
# download; 1,280 training images are 20 batches of 64 an epoch (on 2 slots, 20 of 32 per worker).
MNIST_SYNTHETIC_DATA_PY = '''import pathlib
from typing import Any

import torch


def get_dataset(data_dir: pathlib.Path, train: bool) -> Any:
    generator = torch.Generator().manual_seed(0 if train else 1)
    count = 1280 if train else 128
    images = torch.randn(count, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (count,), generator=generator)
    return torch.utils.data.TensorDataset(images, labels)
'''
MNIST_EPOCH_BATCHES = 20

# Ours: a trial that runs until it is told to stop, through Determined's Core API.
SLEEPER_PY = """import logging
import time

import determined as det

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        for _ in range(3600):
            time.sleep(0.5)
            if core_context.preempt.should_preempt():
                logging.info("preempted: exiting")
                break
"""


def tutorial_context(work: Path, stage: str) -> Path:
    context = work / "contexts" / stage
    if not context.exists():
        context.mkdir(parents=True)
        if stage == "0_start":
            (context / "0_start.py").write_text(TUTORIAL_0_PY)
        else:
            shutil.copy(TUTORIALS / f"{stage}.py", context)
    return context


def tutorial_config(work: Path, stage: str, stem: str, /, **changes: Any) -> Path:
    text = TUTORIAL_0_YAML if stage == "0_start" else (TUTORIALS / f"{stage}.yaml").read_text()
    config = yaml.safe_load(text)
    config["environment"] = {"image": ENVIRONMENT}
    config.update(changes)
    path = work / "configs" / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def sleep_config(work: Path, name: str) -> tuple[Path, Path]:
    """An experiment whose one trial runs until it is told to stop (a Core API script that checks for
    preemption twice a second): for the commands that act on running work."""
    context = work / "contexts" / "sleeper"
    context.mkdir(parents=True, exist_ok=True)
    (context / "sleeper.py").write_text(SLEEPER_PY)
    config = {"name": name, "entrypoint": "python3 sleeper.py", "searcher": {"name": "single", "metric": "x"},
              "max_restarts": 0, "environment": {"image": ENVIRONMENT}}
    path = work / "configs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path, context


def mnist_context(work: Path) -> Path:
    context = work / "contexts" / "mnist_pytorch"
    if not context.exists():
        context.mkdir(parents=True)
        (context / "train.py").write_text(MNIST_TRAIN_PY)
        (context / "model.py").write_text(MNIST_MODEL_PY)
        (context / "data.py").write_text(MNIST_SYNTHETIC_DATA_PY)
        (context / "const.yaml").write_text(MNIST_CONST_YAML)
        (context / "distributed.yaml").write_text(MNIST_DISTRIBUTED_YAML)
    return context


def mnist_config(work: Path, which: str, stem: str, /, **changes: Any) -> Path:
    config = yaml.safe_load(MNIST_CONST_YAML if which == "const" else MNIST_DISTRIBUTED_YAML)
    config["environment"] = {"image": ENVIRONMENT}
    config.update(changes)
    path = work / "configs" / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path
