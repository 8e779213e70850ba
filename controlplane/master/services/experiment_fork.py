"""Fork: a new experiment from an existing one's code (Determined's ``parentId`` on create, what its
web UI's Fork and Continue-as-new send): the parent's context archive is reused, and a secret the
parent's config holds comes back wherever the forked config (read from an answer, so masked)
still says ``********``. Reading another user's code and secrets is ``READ_OWN`` (owner or admin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.master.authz import Action, require_owner
from controlplane.master.errors import NotFound
from controlplane.master.principals import AuthedUser
from controlplane.master.redaction import restore_masked
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads


@dataclass(frozen=True)
class Parent:
    id: int
    config: dict[str, Any]
    archive: bytes
    digest: str


async def parent_of(rt: MasterRuntime, user: AuthedUser, parent_id: int) -> Parent:
    async with rt.sessions() as session:
        exp = await experiment_reads.experiment_without_code(session, parent_id)
        if exp is None:
            raise NotFound(f"parentId: experiment {parent_id} not found")
        require_owner(user, Action.READ_OWN, exp.owner_id, f"experiment {parent_id}'s code")
        archive = await experiment_reads.model_definition(session, parent_id)
        return Parent(exp.id, dict(exp.config), archive, exp.context_hash)


def with_parent_secrets(raw: dict[str, Any], parent: Parent) -> dict[str, Any]:
    """The forked config with each masked secret given back the parent's value."""
    return restore_masked(raw, parent.config)
