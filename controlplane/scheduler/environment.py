"""Task environments: which environment a task asks for, and which agents offer it.

Determined's ``environment.image`` names the container image a task runs in: one string for every
device type, or a ``{cpu, cuda, rocm}`` map (``gpu`` is Determined's older name for ``cuda``) from
which the container's device type picks (CPU for a task without slots). Without a Docker engine,
an environment here is a Python environment an agent declares (``det-agent --environment
NAME=PATH``); every agent offers its own interpreter as ``default``, which is what a config
without ``image`` asks for. A map's missing device types mean ``default`` too.

Pure: the master parses a stored config with :func:`image_of`, the planner asks
``AgentSnapshot.offers``; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DEFAULT = "default"
DEVICE_TYPES = ("cpu", "cuda", "rocm")
_ALIASES = {"gpu": "cuda"}
FIELD = "environment.image"


@dataclass(frozen=True)
class Image:
    """The environment a task needs, per device type of the slots it gets."""

    cpu: str = DEFAULT
    cuda: str = DEFAULT
    rocm: str = DEFAULT
    # An OpenPAI job's gpuType: only agents with a GPU model containing it (case-insensitively).
    gpu_type: str | None = None

    def fits_gpus(self, gpu_models: frozenset[str]) -> bool:
        """Whether agents with these GPU models (their slots' brands, lower-cased) can run it."""
        return self.gpu_type is None or any(self.gpu_type.lower() in m for m in gpu_models)

    def for_slot_type(self, slot_type: str) -> str:
        """The name for an agent whose slots are of this type (CPU for anything else)."""
        return self.cuda if slot_type == "cuda" else self.rocm if slot_type == "rocm" else self.cpu

    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.cpu, self.cuda, self.rocm)))

    def describe(self) -> str:
        if self.cpu == self.cuda == self.rocm:
            return repr(self.cpu)
        return ", ".join(f"{t}: {getattr(self, t)!r}" for t in DEVICE_TYPES)


DEFAULT_IMAGE = Image()


def image_of(value: Any) -> Image:
    """``environment.image`` as stored (absent: ``default``); raises ValueError saying what is wrong."""
    if value is None:
        return DEFAULT_IMAGE
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("must name an environment, got an empty string")
        return Image(value, value, value)
    if not isinstance(value, dict):
        raise ValueError(f"must be a name or a map of cpu/cuda/rocm to names, got {type(value).__name__}")
    names: dict[str, str] = {}
    for key, name in value.items():
        device = _ALIASES.get(str(key), str(key))
        if device not in DEVICE_TYPES:
            raise ValueError(f"unknown device type {key!r} (expected {', '.join(DEVICE_TYPES)})")
        if name is None:
            continue
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{key}: must name an environment, got {name!r}")
        if device in names and names[device] != name:
            raise ValueError(f"{key}: names {name!r} but {device} names {names[device]!r}")
        names[device] = name
    return Image(**names)


def image_of_config(config: dict[str, Any]) -> Image:
    """The image of a stored experiment config (validated at create time)."""
    env = config.get("environment") if isinstance(config, dict) else None
    return image_of(env.get("image") if isinstance(env, dict) else None)


def slot_type_of(slot_types: Iterable[str]) -> str:
    """An agent's device type: that of its slots, CPU for an agent with none."""
    for t in slot_types:
        return t
    return "cpu"

