"""Which checkpoints garbage collection removes: a pure policy over snapshots (`policy.py`).

Deleting them (storage first, then the database, retried until done) is the master's job:
`controlplane/master/services/checkpoint_gc.py`.
"""

from controlplane.checkpoint_gc.policy import CheckpointView, Doomed, SavePolicy, doomed

__all__ = ["CheckpointView", "Doomed", "SavePolicy", "doomed"]
