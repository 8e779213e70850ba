"""Checks `det deploy aws|gcp up` runs before anything is created: credentials, the region offers
the instance/machine types, and the vCPU and GPU quotas hold `--max-dynamic-agents` agents.

Each cloud's `check(opts, ...)` returns a `Report`: every failure is one sentence, all are
reported together; what could not be checked is a warning, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures
