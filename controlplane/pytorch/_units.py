"""Training lengths and periods: ``Batch(n)`` and ``Epoch(n)`` (Determined's ``TrainUnit``s).

An int is a period (``Batch(100)``: every 100 batches); a container is a schedule
(``Batch([5, 30])``: after batches 5 and 30). Records become batches of the global batch size.
A batch is one step of the whole trial: every worker trains one per-slot batch.
"""

from __future__ import annotations

import sys
from collections import abc
from typing import Any


class TrainUnit:
    def __init__(self, value: int | abc.Container[Any]) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.value == other.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.value)))

    def should_stop(self, step_num: int) -> bool:
        """Whether ``step_num`` (batches, or epochs for ``Epoch``) is on this period or schedule."""
        if isinstance(self.value, int):
            if self.value < 1:
                return True
            return step_num > 0 and step_num % self.value == 0
        return step_num in self.value

    @staticmethod
    def _from_values(batches: int | None = None, records: int | None = None, epochs: int | None = None,
                     global_batch_size: int | None = None) -> TrainUnit:
        """One of ``{batches|records|epochs: n}`` (an experiment config's period); n < 1 means never."""
        if sum(v is not None for v in (batches, records, epochs)) != 1:
            raise ValueError(f"a length needs exactly one of batches, records, epochs; got batches={batches} "
                             f"records={records} epochs={epochs}")
        if batches is not None:
            return Batch(batches if batches >= 1 else sys.maxsize)
        if records is not None:
            if not global_batch_size:
                raise ValueError("a length in records needs the global_batch_size hyperparameter")
            return Batch._from_records(records, global_batch_size) if records >= 1 else Batch(sys.maxsize)
        assert epochs is not None
        return Epoch(epochs if epochs >= 1 else sys.maxsize)

    @staticmethod
    def _from_config(value: object, what: str, global_batch_size: int | None) -> TrainUnit | None:
        """An experiment config length: ``{unit: n}`` or a bare int (batches); None when unset."""
        if value is None:
            return None
        if isinstance(value, bool):
            raise ValueError(f"{what} must be {{batches|records|epochs: n}}, got {value!r}")
        if isinstance(value, int):
            return Batch(value if value >= 1 else sys.maxsize)
        if isinstance(value, dict) and len(value) == 1:
            unit, n = next(iter(value.items()))
            if unit in ("batches", "records", "epochs") and isinstance(n, int) and not isinstance(n, bool):
                return TrainUnit._from_values(**{unit: n}, global_batch_size=global_batch_size)
        raise ValueError(f"{what} must be {{batches|records|epochs: n}}, got {value!r}")


class Batch(TrainUnit):
    """A number (or schedule) of batches."""

    @staticmethod
    def _from_records(records: int, global_batch_size: int) -> Batch:
        return Batch(max(records // global_batch_size, 1))


class Epoch(TrainUnit):
    """A number (or schedule) of epochs; an epoch ends after the last batch of the training data
    (``records_per_epoch`` / global batch size when the config sets ``records_per_epoch``)."""
