"""The one authorization table: which principal may do which action, and on whose work.

Every route names its ``Action`` (``opt={"action": ...}`` on the handler); the API guard
checks the role part before the handler runs, and handlers that act on someone's work call
``require_owner`` once they have loaded it. Nothing else decides who may do what.

Rules per (principal kind, action):
- ``ALLOW``: always.
- ``OWNER``: only on work the caller owns (admins pass every ``OWNER`` rule).
- ``OWN_TASK``: a task token, only for its own trial / allocation / task (checked by the
  handler through ``require_trial`` and friends).
- ``DENY``: never.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Any

from controlplane.master.errors import Forbidden
from controlplane.master.principals import AuthedUser, Principal, Role, TaskPrincipal


class Action(StrEnum):
    PUBLIC = "public"                # no credentials: /info, login, the docs page
    AGENT = "agent"                  # the agent socket: the join token, checked by the handler
    SIGNED_IN = "signed_in"          # any signed-in user acting on themselves: /me, logout, own password
    VIEW = "view"                    # read experiments, trials, metrics, logs, checkpoints, models, queue
    READ_OWN = "read_own"            # read what only the owner sees: code (model definition, a task's context)
    TASK_REPORT = "task_report"      # a training process reporting metrics, logs, checkpoints, progress
    TASK_READ = "task_read"          # a training process reading what it needs (preemption, rendezvous)
    CREATE = "create"                # submit experiments, create models
    EDIT = "edit"                    # change, pause, kill, delete work: owner or admin
    ADMINISTER = "administer"        # agents, pools, users, cluster settings


class Rule(Enum):
    ALLOW = "allow"
    OWNER = "owner"
    OWN_TASK = "own_task"
    DENY = "deny"


TASK = "task"
A, O, T, D = Rule.ALLOW, Rule.OWNER, Rule.OWN_TASK, Rule.DENY  # noqa: E741 (short names keep the table readable)

#                        admin  user  viewer  task
TABLE: dict[Action, dict[str, Rule]] = {
    Action.PUBLIC:      {Role.ADMIN: A, Role.USER: A, Role.VIEWER: A, TASK: A},
    Action.AGENT:       {Role.ADMIN: A, Role.USER: A, Role.VIEWER: A, TASK: A},
    Action.SIGNED_IN:   {Role.ADMIN: A, Role.USER: A, Role.VIEWER: A, TASK: D},
    Action.VIEW:        {Role.ADMIN: A, Role.USER: A, Role.VIEWER: A, TASK: T},
    Action.READ_OWN:    {Role.ADMIN: A, Role.USER: O, Role.VIEWER: O, TASK: T},
    Action.TASK_READ:   {Role.ADMIN: A, Role.USER: A, Role.VIEWER: A, TASK: T},
    Action.TASK_REPORT: {Role.ADMIN: A, Role.USER: O, Role.VIEWER: D, TASK: T},
    Action.CREATE:      {Role.ADMIN: A, Role.USER: A, Role.VIEWER: D, TASK: D},
    Action.EDIT:        {Role.ADMIN: A, Role.USER: O, Role.VIEWER: D, TASK: D},
    Action.ADMINISTER:  {Role.ADMIN: A, Role.USER: D, Role.VIEWER: D, TASK: D},
}

# Actions that need no credentials at all: the guard does not authenticate for these.
UNAUTHENTICATED = frozenset({Action.PUBLIC, Action.AGENT})


def kind_of(principal: Principal) -> str:
    return TASK if isinstance(principal, TaskPrincipal) else principal.role


def rule_for(principal: Principal, action: Action) -> Rule:
    return TABLE[action][kind_of(principal)]


def check_role(principal: Principal, action: Action) -> None:
    """The part of the rule that needs no resource: refuses DENY outright."""
    if rule_for(principal, action) is Rule.DENY:
        who = "a task token" if isinstance(principal, TaskPrincipal) else f"role {principal.role}"
        raise Forbidden(f"{who} may not {action.value.replace('_', ' ')}")


def allows(principal: Principal, action: Action, owner_id: int | None = None) -> bool:
    """Whether the caller may do ``action`` on work owned by ``owner_id`` (None: no owner to check).
    The web UI asks this to decide which buttons a page shows; the API still checks every request."""
    rule = rule_for(principal, action)
    if rule is Rule.ALLOW or rule is Rule.OWN_TASK:
        return True  # task scope is checked by require_trial / require_task and the route's task_scope
    if rule is Rule.OWNER:
        return owner_id is None or (isinstance(principal, AuthedUser) and principal.id == owner_id)
    return False


def require_owner(principal: Principal, action: Action, owner_id: int, what: str) -> None:
    """For OWNER rules: the caller must own ``what`` (e.g. "experiment 3") unless the rule allows all."""
    if allows(principal, action, owner_id):
        return
    raise Forbidden(f"only the owner of {what} or an admin may {action.value.replace('_', ' ')} it")


def opt(action: Action, task_scope: tuple[str, str] | str | None = None) -> dict[str, Any]:
    """A route's ``opt``: its action and, where a task token may call it, what it is scoped to:
    ``("trial", "trial_id")`` names the path parameter that must be the task's own trial
    (or ``"allocation"``, ``"task"``); ``"body"`` means the handler checks ids in the body."""
    out: dict[str, Any] = {"action": action}
    if task_scope is not None:
        out["task_scope"] = task_scope
    return out
