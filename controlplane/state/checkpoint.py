"""Checkpoint states, stored as Determined's API spells them (``checkpointv1State``)."""

from typing import Final

ACTIVE: Final = "STATE_ACTIVE"  # announced before its upload, not reported complete yet
COMPLETED: Final = "STATE_COMPLETED"
PARTIALLY_DELETED: Final = "STATE_PARTIALLY_DELETED"  # its files are being deleted (garbage collection)
DELETED: Final = "STATE_DELETED"
ERROR: Final = "STATE_ERROR"

ALL: Final = frozenset({ACTIVE, COMPLETED, PARTIALLY_DELETED, DELETED, ERROR})
