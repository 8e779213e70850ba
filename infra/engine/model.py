"""What `det deploy` needs from a Pulumi stack, as a Protocol that tests fake.

A stack is one deployment: its name is the cluster id, its project `controlplane-aws` or
`controlplane-gcp`. Implementations stream Pulumi's progress through `on_output` (one line of
Pulumi's own output per call) and raise `EngineError` with the provider's message on failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from infra.stack_config import DB_PASSWORD, JOIN_TOKEN

OnOutput = Callable[[str], None]
PulumiProgram = Callable[[], None]

SECRETS = (JOIN_TOKEN, DB_PASSWORD)
DB_SETTING = "db"  # the `--db` a stack was last brought up with: what a replaced master would lose


def project_name(cloud: str) -> str:
    return f"controlplane-{cloud}"


@dataclass(frozen=True)
class ResourceChange:
    """One step a preview plans: `op` is Pulumi's (create, update, replace, delete, ...)."""

    op: str
    type: str  # e.g. "aws:rds/instance:Instance"
    name: str  # the logical name in the program
    replace_reasons: tuple[str, ...] = ()  # the properties that force the replacement, when Pulumi says


@dataclass(frozen=True)
class StackInfo:
    name: str
    last_update: str | None = None
    resource_count: int | None = None
    update_in_progress: bool = False
    outputs: dict[str, Any] = field(default_factory=dict)


class DeploymentStack(Protocol):
    name: str
    existed: bool  # False when this run created it: nothing to preview against

    def settings(self) -> dict[str, str]:
        """The stack's plain (non-secret) config, keys without the project prefix ("aws:region" stays)."""
        ...

    def set_settings(self, values: Mapping[str, str]) -> None: ...

    def ensure_secrets(self) -> list[str]:
        """Generate the join token and database password as secret config if absent; never regenerate.
        Returns the names it generated."""
        ...

    def preview(self) -> list[ResourceChange]: ...

    def up(self, on_output: OnOutput) -> dict[str, Any]:
        """Create or update everything; returns the stack's outputs (secrets masked)."""
        ...

    def destroy(self, on_output: OnOutput) -> None: ...

    def outputs(self) -> dict[str, Any]: ...


class StackEngine(Protocol):
    def open(self, cluster_id: str, program: PulumiProgram | None, *, create: bool) -> DeploymentStack | None:
        """The cluster's stack; created when `create`, else None if it does not exist."""
        ...

    def list(self) -> list[StackInfo]: ...
