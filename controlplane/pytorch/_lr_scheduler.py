"""``pytorch.LRScheduler``: a torch LR scheduler that the trainer steps and checkpoints."""

from __future__ import annotations

import enum
from typing import Any


class LRScheduler:
    class StepMode(enum.Enum):
        """When the trainer calls ``scheduler.step()``: after every ``frequency`` epochs, batches or
        optimizer steps (the same as batches here), or never (``MANUAL_STEP``: the trial does)."""

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: StepMode, frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be an LRScheduler.StepMode, got {type(step_mode).__name__}")
        if frequency < 1:
            raise ValueError(f"frequency must be >= 1, got {frequency}")
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[Any]:
        return list(self._scheduler.get_last_lr())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, Any]:
        return dict(self._scheduler.state_dict())
