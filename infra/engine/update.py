"""`up` over any DeploymentStack: settings and secrets, then (for an existing stack) a preview
whose replacements are shown and guarded, then the update.

Confirmation rules (see `guard.py`): replacing the database needs `allow_db_replace` or the
cluster id typed back at `confirm`; other replacements need `assume_yes` or a yes at `confirm`.
`confirm(question, expected)` returns False when nobody can answer (no terminal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.engine import guard
from infra.engine.errors import Refused
from infra.engine.model import DB_SETTING, DeploymentStack, OnOutput

Confirm = Callable[[str, "str | None"], bool]  # (question, the text to type back or None for yes/no)


@dataclass(frozen=True)
class UpPolicy:
    assume_yes: bool = False  # --yes: replacements other than the database's
    allow_db_replace: bool = False  # --allow-db-replace: the database's too


def bring_up(stack: DeploymentStack, *, db_mode: str, settings: Mapping[str, str], policy: UpPolicy,
             confirm: Confirm, say: OnOutput) -> dict[str, Any]:
    previous_db = stack.settings().get(DB_SETTING)
    stack.set_settings(settings)
    generated = stack.ensure_secrets()
    if generated:
        say(f"Generated {' and '.join(generated)} (stored as encrypted Pulumi secrets, never shown).")
    if stack.existed:
        _guard(stack, previous_db, policy, confirm, say)
    stack.set_settings({DB_SETTING: db_mode})  # only once the guard let the change through
    return stack.up(say)


def _guard(stack: DeploymentStack, previous_db: str | None, policy: UpPolicy, confirm: Confirm,
           say: OnOutput) -> None:
    changes = stack.preview()
    replaced = guard.replacements(changes)
    losses = guard.database_losses(changes, previous_db)
    if not replaced and not losses:
        return
    say(f"This update of {stack.name} would replace or delete:")
    for line in guard.describe(replaced + [c for c in losses if c not in replaced]):
        say(line)
    if losses:
        if policy.allow_db_replace:
            say("Replacing the database (--allow-db-replace): its data will be lost.")
        elif not confirm(f"This loses the cluster's database and every experiment in it. "
                         f"Type the cluster id ({stack.name}) to go on", stack.name):
            raise Refused("the update would replace the cluster's database and was not confirmed; "
                          "run it again with --allow-db-replace to accept losing the data, "
                          "or keep the options (--db, --region, instance types) it was created with")
        return
    if not policy.assume_yes and not confirm("Replace these resources?", None):
        raise Refused("the replacements were not confirmed; run it again with --yes to accept them")
