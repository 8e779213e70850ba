"""The Trial API for PyTorch: ``from controlplane import pytorch`` where Determined code has
``from determined import pytorch``; a ``PyTorchTrial`` ports by changing that import.

- ``PyTorchTrial`` / ``PyTorchTrialContext``: the trial class and what it is built with.
- ``DataLoader``: sharded per worker, repeated, resumed exactly after a checkpoint.
- ``Trainer`` / ``init``: train a trial from a script; ``python3 -m controlplane.exec.harness
  model_def:MyTrial`` (the ``--trial`` of the launchers) does it from the experiment config.
- ``LRScheduler``, ``PyTorchCallback``, ``Reducer``, ``Batch`` / ``Epoch``.
"""

from controlplane.pytorch._callback import PyTorchCallback
from controlplane.pytorch._context import PyTorchTrialContext
from controlplane.pytorch._data import DataLoader, TorchData, data_length, to_device
from controlplane.pytorch._lr_scheduler import LRScheduler
from controlplane.pytorch._reducer import Reducer
from controlplane.pytorch._trainer import Trainer, init
from controlplane.pytorch._trial import PyTorchTrial
from controlplane.pytorch._units import Batch, Epoch, TrainUnit

__all__ = ["Batch", "DataLoader", "Epoch", "LRScheduler", "PyTorchCallback", "PyTorchTrial", "PyTorchTrialContext",
           "Reducer", "TorchData", "TrainUnit", "Trainer", "data_length", "init", "to_device"]
