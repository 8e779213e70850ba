"""`down`'s stack half, after the agents are gone: a managed database (RDS, Cloud SQL) is created
with deletion protection, so destroying the stack would fail on it half-way. Only
`--delete-database` lets it go: one update switches the protection off, then the stack is
destroyed (RDS still keeps its final snapshot `<cluster>-final`). Without it, `down` refuses
before anything is touched."""

from __future__ import annotations

from infra.engine.errors import Refused
from infra.engine.model import DB_SETTING, DeploymentStack, OnOutput
from infra.stack_config import DB_PROTECTION, MANAGED_DATABASES


def check_database(stack: DeploymentStack, *, delete_database: bool) -> None:
    """Raises Refused when the stack holds a managed database and `--delete-database` was not given."""
    db = stack.settings().get(DB_SETTING)
    if db in MANAGED_DATABASES and not delete_database:
        kept = " (a final snapshot is kept)" if db == "rds" else ""
        raise Refused(f"cluster {stack.name} keeps its database on {'RDS' if db == 'rds' else 'Cloud SQL'} with "
                      f"deletion protection: nothing was changed; run down again with --delete-database to "
                      f"delete it and every experiment in it{kept}")


def destroy(stack: DeploymentStack, *, delete_database: bool, say: OnOutput) -> None:
    check_database(stack, delete_database=delete_database)
    if stack.settings().get(DB_SETTING) in MANAGED_DATABASES:
        say("Switching off the database's deletion protection (--delete-database)...")
        stack.set_settings({DB_PROTECTION: "false"})
        stack.up(say)
    stack.destroy(say)
