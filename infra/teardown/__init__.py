"""`det deploy aws|gcp down`'s cleanup before the stack is destroyed.

The master launches agents that Pulumi never saw, so `down` first stops the master (it would
replace what is terminated), then removes every instance carrying the deployment's tag or label
(and, on AWS, cancels its spot requests first so none is fulfilled again), waits until none is
left running (bounded, with progress) and reports what it did. Only then is the stack destroyed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TeardownReport:
    master_stopped: list[str] = field(default_factory=list)
    spot_requests_cancelled: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    still_running: list[str] = field(default_factory=list)  # left when the wait ran out

    def lines(self) -> list[str]:
        def names(ids: list[str]) -> str:
            return ", ".join(ids) if ids else "none"

        out = [f"Stopped the master: {names(self.master_stopped)}."]
        if self.spot_requests_cancelled:
            out.append(f"Cancelled spot requests: {names(self.spot_requests_cancelled)}.")
        out.append(f"Terminated agents: {names(self.terminated)}.")
        if self.still_running:
            out.append(f"Still shutting down: {names(self.still_running)}.")
        return out


class TeardownError(Exception):
    """A cleanup call failed; the message is the provider's own."""


def wait_gone(left: Callable[[], list[str]], *, verb: str, say: Callable[[str], None], timeout_s: float,
              poll_s: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> list[str]:
    """Poll `left()` (the instances still shutting down, sorted) until it is empty or `timeout_s`
    has passed, with a progress line per round; what is still there at the end."""
    start = clock()
    while True:
        remaining = left()
        if not remaining:
            return []
        waited = clock() - start
        if waited >= timeout_s:
            say(f"Gave up waiting after {waited:.0f}s; still shutting down: {', '.join(remaining)}")
            return remaining
        say(f"Waiting for {len(remaining)} instance(s) to {verb} ({waited:.0f}s)...")
        sleep(poll_s)
