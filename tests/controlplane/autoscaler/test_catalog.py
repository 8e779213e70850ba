"""The built-in catalogue of GPU instance types: slots, GPU model and list prices."""

from __future__ import annotations

import pytest

from controlplane.autoscaler import Shape
from controlplane.autoscaler.catalog import CATALOG, lookup


@pytest.mark.parametrize(("name", "slots", "gpu", "usd"), [
    ("g5.xlarge", 1, "A10G", 1.006), ("g5.12xlarge", 4, "A10G", 5.672), ("g5.48xlarge", 8, "A10G", 16.288),
    ("p4d.24xlarge", 8, "A100", 32.7726),
])
def test_the_figures_the_issue_names(name, slots, gpu, usd):
    entry = lookup(name)
    assert entry is not None and (entry.slots, entry.gpu_model, entry.usd_per_hour) == (slots, gpu, usd)
    assert entry.cloud == "aws" and entry.spot_usd_per_hour == 0.0  # spot: unknown unless configured


def test_common_aws_and_gce_gpu_types_are_listed():
    aws = ["g4dn.xlarge", "g4dn.12xlarge", "g4dn.metal", "g5.2xlarge", "g5.24xlarge", "g6.xlarge", "g6.12xlarge",
           "g6.48xlarge", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p5.48xlarge"]
    gce = ["a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g", "a2-ultragpu-1g", "a2-ultragpu-8g",
           "g2-standard-4", "g2-standard-24", "g2-standard-48", "g2-standard-96", "a3-highgpu-8g"]
    assert all(CATALOG[t].cloud == "aws" for t in aws) and all(CATALOG[t].cloud == "gcp" for t in gce)
    slots = [CATALOG[t].slots for t in ("a2-highgpu-1g", "a2-highgpu-8g", "g2-standard-48", "p3.16xlarge")]
    assert slots == [1, 8, 4, 8]
    for e in CATALOG.values():  # every entry is usable as it stands
        assert e.slots >= 1 and e.gpu_model and e.usd_per_hour > 0 and e.instance_type in CATALOG


def test_unknown_types_are_none_and_entries_become_shapes():
    assert lookup("t3.micro") is None and lookup("G5.XLARGE") is None
    assert lookup("g5.12xlarge").shape() == Shape("g5.12xlarge", 4, 5.672, 0.0, "A10G")
    assert lookup("g5.12xlarge").shape(slots=2).slots == 2  # a config's slots_per_instance wins
    with pytest.raises(TypeError):
        CATALOG["x"] = CATALOG["g5.xlarge"]  # type: ignore[index]  # read-only
