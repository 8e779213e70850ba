"""Request bodies of the experiment routes, as Determined's client sends them (reference §2.2, §3).

Decoded once at the API edge; ``services/experiments.py`` reads a create request through
``body_field`` and ``services/context.py`` reads its ``v1File`` entries by attribute.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from controlplane.master.errors import BadRequest
from controlplane.master.services.fields import Id, Labels, Name, Text

MAX_WEIGHT = 1e6


class V1File(msgspec.Struct, rename="camel", kw_only=True):
    """One context entry: names and kinds are checked by ``services/context.py``."""

    path: Annotated[str, msgspec.Meta(max_length=4096)]
    type: Annotated[int, msgspec.Meta(ge=0, le=255)] = 48
    content: str = ""
    mode: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] = 0o644
    mtime: Annotated[str, msgspec.Meta(max_length=40)] | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] = "0"
    uid: Id = 0
    gid: Id = 0


# A config's JSON larger than this many times ``max_config_bytes`` is refused unread (pretty-printed
# JSON and a YAML text's escapes take more room than the config itself; none takes this much).
CONFIG_JSON_FACTOR = 8


class CreateExperimentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1CreateExperimentRequest``: ``config`` is the YAML text (or an object), kept
    as its JSON text when the body is decoded (``api.typed_body``: one scan, no Python objects) and
    read by ``config_value`` in a worker thread, so a huge one never holds the event loop."""

    config: Annotated[msgspec.Raw, msgspec.Meta(
        description="the experiment configuration: its YAML text, or a JSON object")]
    model_definition: list[V1File] = []
    activate: bool | None = None
    validate_only: bool = False
    parent_id: Id | None = None
    project_id: Id | None = None
    template: Name | None = None
    template_name: Name | None = None
    unmanaged: bool | None = None


def config_value(raw: msgspec.Raw, max_config_bytes: int) -> Any:
    """A create request's ``config`` (the YAML text, or a JSON object), its size checked before
    a byte of it becomes a Python object."""
    if len(raw) > CONFIG_JSON_FACTOR * max_config_bytes:
        raise BadRequest(f"config: {len(raw)} bytes of JSON, over the limit (the config itself may hold "
                         f"{max_config_bytes} bytes)")
    value = msgspec.json.decode(raw)
    if not isinstance(value, (str, dict)):
        raise BadRequest(f"config: must be the YAML text or a JSON object, got {type(value).__name__}")
    return value


class PatchResources(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PatchExperimentPatchResources``; ``maxSlots: null`` lifts the cap."""

    max_slots: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | None | msgspec.UnsetType = msgspec.UNSET
    weight: Annotated[float, msgspec.Meta(gt=0, le=MAX_WEIGHT)] | None = None
    # 1..99: checked with the pool's scheduler
    priority: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)] | None = None


class PatchCheckpointStorage(msgspec.Struct, rename="camel", kw_only=True):
    save_experiment_best: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    save_trial_best: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    save_trial_latest: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None


class PatchExperiment(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PatchExperiment``: the fields given are changed, the others kept."""

    id: Id | None = None
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00]*$")] | None = None
    description: Text | None = None
    notes: Text | None = None
    labels: Labels | None = None
    resources: PatchResources | None = None
    checkpoint_storage: PatchCheckpointStorage | None = None


class PatchExperimentRequest(PatchExperiment, kw_only=True):
    """The patch itself, or wrapped as ``{"experiment": {...}}`` as some generated clients send it."""

    experiment: PatchExperiment | None = None

    def patch(self) -> PatchExperiment:
        return self.experiment if self.experiment is not None else self
