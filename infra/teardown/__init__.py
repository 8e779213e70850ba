"""`det deploy aws|gcp down`'s cleanup before the stack is destroyed.

The master launches agents that Pulumi never saw, so `down` first stops the master (it would
replace what is terminated), then removes every instance carrying the deployment's tag or label
(and, on AWS, cancels its spot requests first so none is fulfilled again), waits until none is
left running (bounded, with progress) and reports what it did. Only then is the stack destroyed.
"""

from __future__ import annotations

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
