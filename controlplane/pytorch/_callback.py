"""``pytorch.PyTorchCallback``: hooks a trial returns from ``build_callbacks()``; all optional."""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before training starts (or resumes at ``first_batch_idx``)."""

    def on_trial_shutdown(self) -> None:
        """When the trainer stops, however it stops."""

    def on_training_start(self) -> None:
        """After a checkpoint was restored, before the first batch."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of each epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of each epoch."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: list[Any]) -> None:
        """After each reporting period, with the averaged training metrics."""

    def on_validation_start(self) -> None:
        """Before each validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After each validation, with its reduced metrics (on every worker)."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the trainer wrote a checkpoint's files (on the chief), before they are stored."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After a checkpoint was stored and reported (on every worker)."""

    def state_dict(self) -> dict[str, Any]:
        """State kept in checkpoints and given back to ``load_state_dict`` on restore."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""
