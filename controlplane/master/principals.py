"""Who is calling: a signed-in user or a running task (its allocation's session token).

These are plain values built at the API edge and handed to services, so services never
import from ``api/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"
    VIEWER = "viewer"  # read-only


@dataclass(frozen=True)
class AuthedUser:
    id: int
    username: str
    role: Role = Role.USER

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN


@dataclass(frozen=True)
class TaskPrincipal:
    """A training process: good only for its own allocation, task and trial run."""

    allocation_id: str
    task_id: str
    trial_id: int | None
    run_id: int = 0


Principal = AuthedUser | TaskPrincipal
