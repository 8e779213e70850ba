"""Field types shared by the request bodies of experiments, jobs, models and checkpoints.

Bounds are those of the columns the values land in: ids are 32-bit, strings carry no NUL
(PostgreSQL refuses it in text), free-form JSON (metadata) is plain JSON of bounded size.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain
from controlplane.master.errors import BadRequest

NO_NUL = r"^[^\x00]*$"
MAX_ID = 2**31 - 1
MAX_INT64 = 2**63 - 1

Id = Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]
Name = Annotated[str, msgspec.Meta(max_length=255, pattern=NO_NUL)]
Text = Annotated[str, msgspec.Meta(max_length=65_536, pattern=NO_NUL)]
Label = Annotated[str, msgspec.Meta(max_length=255, pattern=NO_NUL)]
Labels = Annotated[list[Label], msgspec.Meta(max_length=1000)]
# A new checkpoint's uuid (as the harness makes them), and a reference to any existing one.
NewCheckpointUuid = Annotated[str, msgspec.Meta(min_length=8, max_length=64, pattern=r"^[0-9a-fA-F-]+$")]
CheckpointUuid = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$")]

METADATA_LIMITS = Limits(max_bytes=1024 * 1024, max_depth=32)


def plain_json(value: Any, where: str, limits: Limits = METADATA_LIMITS) -> Any:
    """``value`` if it is plain JSON PostgreSQL can store (64-bit ints, no NUL), else 400 naming the path."""
    try:
        check_plain(value, limits)
    except ConfigError as e:
        raise BadRequest(f"{where}.{e.path}: {e.rule}" if e.path else f"{where}: {e.rule}") from e
    return value
