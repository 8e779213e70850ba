"""The token store: ~/.config/controlplane/auth.json, master URL -> {active, tokens: {username: token}}.

Each user's login is kept; the active one is what plain commands use. `det user login` makes a
login active; `det -u NAME ...` uses (or makes) NAME's login for that command only, as Determined's
own store does, so a one-off `-u admin` never turns the next plain command into admin's.

Tokens are credentials, so the directory is 0700 and the file 0600, and the file is replaced
atomically (write a sibling, chmod, rename) so a crash never leaves a half-written or
world-readable store. `XDG_CONFIG_HOME` is respected like Determined's store is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, Any]) -> None:
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

    def _entry(self, data: dict[str, Any], master: str) -> tuple[str | None, dict[str, str]]:
        """(active user, {user: token}) of a master; the old one-login shape reads as its active user."""
        entry = data.get(master)
        if not isinstance(entry, dict):
            return None, {}
        if "tokens" not in entry:  # {username, token}: written before logins were kept per user
            user, token = entry.get("username"), entry.get("token")
            return (str(user), {str(user): str(token)}) if user and token else (None, {})
        tokens = entry.get("tokens")
        tokens = {str(u): str(t) for u, t in tokens.items() if t} if isinstance(tokens, dict) else {}
        active = entry.get("active")
        return (str(active) if active in tokens else None), tokens

    def get(self, master: str, username: str | None = None) -> StoredToken | None:
        """``username``'s token at ``master``; without a name, the active login's."""
        active, tokens = self._entry(self._read(), master)
        user = username if username is not None else active
        if user is None or user not in tokens:
            return None
        return StoredToken(user, tokens[user])

    def put(self, master: str, username: str, token: str, *, activate: bool = True) -> None:
        """Keep ``username``'s token; ``activate`` makes it the login plain commands use (``det user
        login`` does; a one-off ``det -u NAME`` does not)."""
        data = self._read()
        active, tokens = self._entry(data, master)
        tokens[username] = token
        data[master] = {"active": username if activate else active, "tokens": tokens}
        self._write(data)

    def drop(self, master: str, username: str | None = None) -> StoredToken | None:
        """Forget ``username``'s token (the active login's without a name) and return it."""
        data = self._read()
        active, tokens = self._entry(data, master)
        user = username if username is not None else active
        if user is None or user not in tokens:
            return None
        token = tokens.pop(user)
        data[master] = {"active": None if active == user else active, "tokens": tokens}
        self._write(data)
        return StoredToken(user, token)
