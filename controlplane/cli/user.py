"""`det user` (alias `det u`): login, logout, whoami, change-password.

Login sends `{"username","password","isHashed":false}` and keeps the token per master in the
token store. change-password sends the new password the way Determined 0.38.1 does: a bare JSON
string holding sha512(salt + password) (the empty password stays ""), which the master treats
as the client hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json

from controlplane.cli.common import session_for
from controlplane.cli.errors import CliError
from controlplane.cli.session import DEFAULT_USER, prompt_password

CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"


def salt_and_hash(password: str) -> str:
    """Determined's `api.salt_and_hash`: the empty password is sent as is."""
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest() if password else ""


def cmd_login(args: argparse.Namespace) -> int:
    session = session_for(args)
    username = args.username or args.user or DEFAULT_USER
    password = prompt_password(f"Password for user '{username}': ")
    session.login(username, password, explicit=True)
    print(f"Logged in as user '{username}' at {session.master}")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    session = session_for(args)
    stored = session.store.drop(session.master)
    if stored is None:
        print(f"Not logged in at {session.master}")
        return 0
    try:  # the master forgetting the token is best effort, like Determined
        session._send("POST", "/api/v1/auth/logout", params=None, data=None,
                      headers={"Authorization": f"Bearer {stored.token}"}, timeout=(5.0, 10.0), stream=False)
    except CliError:
        pass
    print(f"Logged out user '{stored.username}' from {session.master}")
    return 0


def cmd_whoami(args: argparse.Namespace) -> int:
    me = session_for(args).get("/api/v1/me").get("user") or {}
    print(f"You are logged in as user '{me.get('username', '')}'")
    return 0


def cmd_change_password(args: argparse.Namespace) -> int:
    session = session_for(args)
    me = session.get("/api/v1/me").get("user") or {}
    username = args.username or me.get("username")
    if username == me.get("username"):
        target = me
    else:
        users = session.get("/api/v1/users", {"name": username}).get("users") or []
        target = next((u for u in users if u.get("username") == username), None)
        if target is None:
            raise CliError(f"user '{username}' not found")
    if not isinstance(target.get("id"), int):
        raise CliError(f"the master sent no id for user '{username}'")
    first = prompt_password(f"New password for user '{username}': ")
    second = prompt_password("Confirm password: ")
    if first != second:
        raise CliError("passwords do not match")
    session.post(f"/api/v1/users/{target['id']}/password", data=json.dumps(salt_and_hash(first)))
    print(f"Password changed for user '{username}'")
    if username == session.username:  # keep working without a second prompt
        try:
            session.login(username, first, explicit=True)
        except CliError:
            pass
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("user", aliases=["u"], help="log in and manage your account")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("login", help="log in (prompts for the password; empty is allowed)")
    p.add_argument("username", nargs="?", metavar="USERNAME")
    p.set_defaults(func=cmd_login)
    p = sub.add_parser("logout", help="forget this master's token")
    p.set_defaults(func=cmd_logout)
    p = sub.add_parser("whoami", help="the user the stored token belongs to")
    p.set_defaults(func=cmd_whoami)
    p = sub.add_parser("change-password", help="set a new password (prompts twice)")
    p.add_argument("username", nargs="?", metavar="USERNAME")
    p.set_defaults(func=cmd_change_password)
