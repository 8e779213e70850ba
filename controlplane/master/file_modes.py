"""The master's files hold secrets (stored configs with storage keys, token hashes), so its data
dir is 0700 and a SQLite database with its -wal/-shm/-journal files 0600.

The database file is created 0600 before SQLite opens it: SQLite gives the -wal, -shm and
journal files it creates later the mode of the database file, so they are born private too.
Files left 0644 by an older master are tightened at start.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url

SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def sqlite_path(db_url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases, in-memory ones and `file:` URIs."""
    url = make_url(db_url)
    if not url.get_backend_name().startswith("sqlite"):
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or url.query.get("uri"):
        return None
    return Path(database)


def private_sqlite_files(db_url: str) -> None:
    path = sqlite_path(db_url)
    if path is None:
        return
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for suffix in SQLITE_COMPANIONS:
        companion = path.with_name(path.name + suffix)
        try:
            os.chmod(companion, 0o600)
        except FileNotFoundError:
            pass
