"""Whether a process id names a process (any user's): the check the CLI's local deployment and
the agent's stale network namespaces both make."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """A process with this id exists (possibly a zombie, possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # there, just not ours to signal
    return True
