"""The Pulumi stack settings the programs read besides the CLI's options, and who sets them.

`joinToken` and `dbPassword` are secrets `det deploy ... up` generates once (`engine/`).
`dbDeletionProtection` is "false" only on the way down: `down --delete-database` switches the
managed database's deletion protection off with one update, then destroys the stack; absent or
anything else keeps it on, so no other update can delete the database.
"""

from __future__ import annotations

from typing import Protocol

JOIN_TOKEN = "joinToken"
DB_PASSWORD = "dbPassword"
DB_PROTECTION = "dbDeletionProtection"
MANAGED_DATABASES = ("rds", "cloudsql")


class _Config(Protocol):
    def get_bool(self, key: str) -> bool | None: ...


def db_protected(config: _Config) -> bool:
    return config.get_bool(DB_PROTECTION) is not False
