"""Which planned replacements need the user's confirmation, decided from a preview alone.

Re-running `up` with other options may make Pulumi replace resources. Replacing the database
loses every experiment, so it is never covered by `--yes`: it needs `--allow-db-replace` or the
cluster id typed at an interactive prompt. The database is the RDS instance / Cloud SQL
instance, and with `--db local` (or an unknown previous mode) the master instance and any disk
it keeps PostgreSQL on. A delete of one of them (switching `--db rds` to `local`) loses it too.
"""

from __future__ import annotations

from collections.abc import Iterable

from infra.engine.model import ResourceChange

REPLACING = frozenset({"replace", "create-replacement", "delete-replaced"})
DESTROYING = REPLACING | {"delete"}

MANAGED_DB_TYPES = frozenset({"aws:rds/instance:Instance", "gcp:sql/databaseInstance:DatabaseInstance"})
# Where a local PostgreSQL's data lives: the master instance, or a disk attached to it.
MASTER_DATA_TYPES = frozenset({"aws:ec2/instance:Instance", "aws:ebs/volume:Volume",
                               "gcp:compute/instance:Instance", "gcp:compute/disk:Disk"})


def _unique(changes: Iterable[ResourceChange], ops: frozenset[str]) -> list[ResourceChange]:
    seen: dict[tuple[str, str], ResourceChange] = {}
    for change in changes:
        if change.op in ops:
            seen.setdefault((change.type, change.name), change)
    return list(seen.values())


def replacements(changes: Iterable[ResourceChange]) -> list[ResourceChange]:
    """Each resource the update would replace, once (Pulumi reports a replace as several steps)."""
    return _unique(changes, REPLACING)


def database_losses(changes: Iterable[ResourceChange], previous_db: str | None) -> list[ResourceChange]:
    """The replacements and deletes that would lose the cluster's database."""
    local = previous_db in (None, "", "local")
    return [c for c in _unique(changes, DESTROYING)
            if c.type in MANAGED_DB_TYPES or (local and c.type in MASTER_DATA_TYPES)]


def describe(changes: Iterable[ResourceChange]) -> list[str]:
    lines = []
    for c in changes:
        why = f" (because of {', '.join(c.replace_reasons)})" if c.replace_reasons else ""
        lines.append(f"  {c.op:<9} {c.type} {c.name}{why}")
    return lines
