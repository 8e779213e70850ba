"""Hyperparameter searchers: pure modules, events in and actions out."""

from controlplane.searchers.base import Create, Searcher, Shutdown, Stop
from controlplane.searchers.registry import make_searcher

__all__ = ["Create", "Searcher", "Shutdown", "Stop", "make_searcher"]
