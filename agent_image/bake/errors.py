"""The bake's own errors: each says in one sentence what failed, for `det agent-image bake` to print.

Cloud SDK errors are classified by the provisioners' one-module-per-cloud tables
(`provisioners/ec2_errors.py`, `gce_errors.py`) and become a `CloudError` naming what the bake
was doing; `translated(action, map_error)` is the one place per cloud that does it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class BakeError(Exception):
    """A bake failure explained in one sentence (`message`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StepFailed(BakeError):
    """A provisioning step exited non-zero on the builder."""

    def __init__(self, step: str, exit_code: int, tail: str) -> None:
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        text = f"provisioning step {step!r} failed with exit code {exit_code}"
        super().__init__(text + (f": {last}" if last else " and printed nothing"))
        self.step, self.exit_code, self.tail = step, exit_code, tail  # the tail: the last lines it printed


class CloudError(BakeError):
    """The cloud refused or failed a call; `provider_message` is the provider's own text."""

    def __init__(self, action: str, provider_message: str, code: str | None = None) -> None:
        super().__init__(f"{action} failed: {f'{code}: ' if code else ''}{provider_message}")
        self.action, self.provider_message, self.code = action, provider_message, code


@contextmanager
def translated(action: str, map_error: Callable[[BaseException], Any]) -> Iterator[None]:
    """SDK exceptions raised inside become a CloudError for `action` (ours pass through)."""
    try:
        yield
    except BakeError:
        raise
    except Exception as exc:  # classification is the point
        err = map_error(exc)
        raise CloudError(action, err.provider_message, err.code) from exc
