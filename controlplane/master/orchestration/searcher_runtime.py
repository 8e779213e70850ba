"""Runs an experiment's searcher: its snapshot lives in experiments.searcher_state, with the basis
of its progress in experiments.progress_basis."""

from __future__ import annotations

from typing import Any

from controlplane.config.experiment import parse_experiment_config
from controlplane.master.db.models import Experiment
from controlplane.searchers.base import Searcher
from controlplane.searchers.registry import make_searcher


def load(exp: Experiment) -> Searcher:
    return load_from(exp.config, exp.searcher_state)


def load_from(config: dict[str, Any], searcher_state: dict[str, Any] | None) -> Searcher:
    """The searcher of a stored config and ``searcher_state`` (parsed and restored: not cheap)."""
    cfg = parse_experiment_config(config)
    fresh = make_searcher(cfg)
    state = searcher_state or {}
    if "searcher" in state:
        return type(fresh).restore(cfg, state["searcher"])
    return fresh


def save(exp: Experiment, searcher: Searcher, *, shutdown: bool | None = None, failure: bool | None = None,
         cancel: bool | None = None) -> None:
    state = dict(exp.searcher_state or {})
    state["searcher"] = searcher.snapshot()
    if shutdown is not None:
        state["shutdown"] = shutdown
    if failure is not None:
        state["failure"] = failure
    if cancel is not None:
        state["cancel"] = cancel
    exp.searcher_state = state  # reassign so SQLAlchemy sees the change
    # What listings compute its progress from without loading the searcher (orchestration/progress.py).
    exp.progress_basis = searcher.progress_basis()


def is_shut_down(exp: Experiment) -> bool:
    return bool((exp.searcher_state or {}).get("shutdown"))


def shut_down_with_failure(exp: Experiment) -> bool:
    return bool((exp.searcher_state or {}).get("failure"))


def shut_down_canceled(exp: Experiment) -> bool:
    """Its search ended with every trial canceled by a user (``det trial kill``)."""
    return bool((exp.searcher_state or {}).get("cancel"))


def started(exp: Experiment) -> bool:
    return "searcher" in (exp.searcher_state or {})
