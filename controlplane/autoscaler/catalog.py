"""A built-in catalogue of common GPU instance types: slots (GPUs), GPU model and $/h.

Pure data and a lookup: what a pool's `instance_types:` / `machine_types:` may name without
giving `slots`, and the prices the burn and the planner's cost use unless master.yaml's `prices:`
overrides them. A type not listed here needs its `slots` in the config and costs 0 until priced.

Prices are public on-demand list prices (Linux, no discounts), USD per hour:
- AWS: us-east-1, from the EC2 on-demand pricing page as of early 2025 (before AWS's
  June 2025 cut of P4/P5 prices; `prices:` overrides them where a pool pays less).
- GCE: us-central1, from the Compute Engine GPU/accelerator-optimized VM pricing pages as of
  early 2025 (A2, A3 and G2 machine types include their GPUs in the machine's price).
Spot prices change by the hour and zone: 0 (unknown) here, so the planner treats spot as costing
the on-demand price until `prices:` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from controlplane.autoscaler.model import Shape


@dataclass(frozen=True)
class CatalogEntry:
    instance_type: str
    cloud: str  # "aws" | "gcp"
    slots: int  # GPUs
    gpu_model: str
    usd_per_hour: float  # on demand
    spot_usd_per_hour: float = 0.0  # 0: unknown

    def shape(self, slots: int | None = None) -> Shape:
        """This type as the planner's Shape (``slots`` overrides the GPU count, e.g. CPU slots)."""
        return Shape(self.instance_type, self.slots if slots is None else slots, self.usd_per_hour,
                     self.spot_usd_per_hour, self.gpu_model)


def _aws(instance_type: str, slots: int, gpu: str, usd: float) -> CatalogEntry:
    return CatalogEntry(instance_type, "aws", slots, gpu, usd)


def _gcp(machine_type: str, slots: int, gpu: str, usd: float) -> CatalogEntry:
    return CatalogEntry(machine_type, "gcp", slots, gpu, usd)


_ENTRIES = (
    # AWS us-east-1, on demand, early 2025
    _aws("g4dn.xlarge", 1, "T4", 0.526),
    _aws("g4dn.2xlarge", 1, "T4", 0.752),
    _aws("g4dn.12xlarge", 4, "T4", 3.912),
    _aws("g4dn.metal", 8, "T4", 7.824),
    _aws("g5.xlarge", 1, "A10G", 1.006),
    _aws("g5.2xlarge", 1, "A10G", 1.212),
    _aws("g5.4xlarge", 1, "A10G", 1.624),
    _aws("g5.12xlarge", 4, "A10G", 5.672),
    _aws("g5.24xlarge", 4, "A10G", 8.144),
    _aws("g5.48xlarge", 8, "A10G", 16.288),
    _aws("g6.xlarge", 1, "L4", 0.8048),
    _aws("g6.2xlarge", 1, "L4", 0.9776),
    _aws("g6.12xlarge", 4, "L4", 4.6016),
    _aws("g6.24xlarge", 4, "L4", 6.6752),
    _aws("g6.48xlarge", 8, "L4", 13.3504),
    _aws("p3.2xlarge", 1, "V100", 3.06),
    _aws("p3.8xlarge", 4, "V100", 12.24),
    _aws("p3.16xlarge", 8, "V100", 24.48),
    _aws("p4d.24xlarge", 8, "A100", 32.7726),
    _aws("p5.48xlarge", 8, "H100", 98.32),
    # GCE us-central1, on demand, early 2025 (GPUs included in the machine type's price)
    _gcp("a2-highgpu-1g", 1, "A100", 3.673385),
    _gcp("a2-highgpu-2g", 2, "A100", 7.34677),
    _gcp("a2-highgpu-4g", 4, "A100", 14.69354),
    _gcp("a2-highgpu-8g", 8, "A100", 29.38708),
    _gcp("a2-ultragpu-1g", 1, "A100-80GB", 5.0688),
    _gcp("a2-ultragpu-8g", 8, "A100-80GB", 40.5504),
    _gcp("g2-standard-4", 1, "L4", 0.70683228),
    _gcp("g2-standard-24", 2, "L4", 1.99948),
    _gcp("g2-standard-48", 4, "L4", 3.99896),
    _gcp("g2-standard-96", 8, "L4", 7.99792),
    _gcp("a3-highgpu-8g", 8, "H100", 88.2488),
)

CATALOG: Mapping[str, CatalogEntry] = MappingProxyType({e.instance_type: e for e in _ENTRIES})


def lookup(instance_type: str) -> CatalogEntry | None:
    """The catalogue's entry for a type (exact name, as the cloud spells it), or None."""
    return CATALOG.get(instance_type)
