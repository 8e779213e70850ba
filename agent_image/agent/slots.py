"""Slot detection: CUDA devices from ``nvidia-smi``, or artificial CPU slots.

The agent reports these in ``Register.slots``; the master schedules on them and hands the
chosen ids back in ``StartTask.slot_ids``.
"""

from __future__ import annotations

import logging
import subprocess

from controlplane.wire.agent_protocol import Slot

log = logging.getLogger(__name__)

NVIDIA_SMI_CMD = ["nvidia-smi", "--query-gpu=index,name,uuid", "--format=csv,noheader"]


def parse_nvidia_smi(output: str) -> list[Slot]:
    """Parse ``index, name, uuid`` CSV lines into cuda slots."""
    slots: list[Slot] = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        slots.append(Slot(id=int(parts[0]), type="cuda", brand=", ".join(parts[1:-1]), uuid=parts[-1]))
    return slots


def probe_gpus(cmd: list[str] | None = None, timeout: float = 15.0) -> list[Slot]:
    """CUDA slots, or [] when nvidia-smi is missing or fails."""
    try:
        res = subprocess.run(cmd or NVIDIA_SMI_CMD, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("nvidia-smi unavailable: %s", exc)
        return []
    if res.returncode != 0:
        log.debug("nvidia-smi exited %s", res.returncode)
        return []
    return parse_nvidia_smi(res.stdout)


def cpu_slots(n: int | None) -> list[Slot]:
    """``n`` artificial CPU slots (ids 0..n-1); one when ``n`` is None."""
    count = 1 if n is None else n
    return [Slot(id=i, type="cpu", brand="cpu") for i in range(count)]


def detect_slots(requested: int | None, slot_type: str = "auto", gpu_cmd: list[str] | None = None) -> list[Slot]:
    if slot_type in ("auto", "cuda"):
        gpus = probe_gpus(gpu_cmd)
        if gpus:
            return gpus
        if slot_type == "cuda":
            log.warning("--slot-type cuda but no GPU found; using CPU slots")
    return cpu_slots(requested)


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "<quota> <period>" or "max <period>"


def available_cpus(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The CPUs this agent's tasks may use, reported in ``Register.cpus``: the CPUs of its affinity
    mask (``os.cpu_count()`` where there is none), fewer when a cgroup v2 CPU quota caps it (a
    container's ``--cpus``: quota / period, rounded up). At least 1."""
    import math
    import os

    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota, _, period = f.read().strip().partition(" ")
        if quota != "max" and int(period) > 0:
            count = min(count, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, count)
