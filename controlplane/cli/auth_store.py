"""The token store: ~/.config/controlplane/auth.json, master URL -> {username, token}.

Tokens are credentials, so the directory is 0700 and the file 0600, and the file is replaced
atomically (write a sibling, chmod, rename) so a crash never leaves a half-written or
world-readable store. `XDG_CONFIG_HOME` is respected like Determined's store is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StoredToken:
    username: str
    token: str


def store_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "controlplane" / "auth.json"


class TokenStore:
    """Read-modify-write access to the store; a missing or unreadable file is an empty store."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, dict[str, str]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2, sort_keys=True)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def get(self, master: str) -> StoredToken | None:
        entry = self._read().get(master)
        if not isinstance(entry, dict) or not entry.get("token"):
            return None
        return StoredToken(str(entry.get("username", "")), str(entry["token"]))

    def put(self, master: str, username: str, token: str) -> None:
        data = self._read()
        data[master] = {"username": username, "token": token}
        self._write(data)

    def drop(self, master: str) -> StoredToken | None:
        data = self._read()
        entry = data.pop(master, None)
        if entry is not None:
            self._write(data)
        if isinstance(entry, dict) and entry.get("token"):
            return StoredToken(str(entry.get("username", "")), str(entry["token"]))
        return None
