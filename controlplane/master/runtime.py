"""One running master: the shared core (``runtime_core.py``) and the parts built over it.

API handlers and services reach the parts through this; the parts themselves take only the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controlplane.master.runtime_core import RuntimeCore

if TYPE_CHECKING:
    from controlplane.master.autoscaling.service import AutoscalerService
    from controlplane.master.checkpoint_gc.loop import CheckpointGcLoop
    from controlplane.master.orchestration.orchestrator import Orchestrator
    from controlplane.master.services.metric_writer import MetricWriter

@dataclass
class MasterRuntime(RuntimeCore):
    # Wired by app.build_runtime right after construction (they need the core themselves).
    orchestrator: Orchestrator = field(init=False)
    checkpoint_gc: CheckpointGcLoop = field(init=False)
    metric_writer: MetricWriter = field(init=False)
    autoscaler: AutoscalerService | None = None  # None when no pool has a provider
