"""`det user` (alias `det u`): login, logout, whoami, change-password, and for admins list,
create, activate, deactivate and set-role.

Login sends `{"username","password","isHashed":false}` and keeps the token per master in the
token store. Passwords otherwise travel as Determined's client hash, sha512(salt + password)
(the empty password stays ""), with `isHashed: true`. Changing one's own password sends the
current one too (`oldPassword`): the master requires it and ends one's other sessions.
`list` prints a table for people and `--json` for scripts.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any
from urllib.parse import quote

from controlplane.cli import render
from controlplane.cli.common import paged, print_json, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.session import DEFAULT_USER, Session, prompt_password

CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
ROLES = ("admin", "user", "viewer")


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
    stored = session.store.drop(session.master, args.user)  # `det -u NAME user logout`: NAME's login
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
    """Sends the salted hash with isHashed, as Determined 0.38.1 does, and the current password
    too when it is one's own, which the master requires; an admin setting someone else's needs
    no current password."""
    session = session_for(args)
    me = session.current_username()
    username = args.username or me
    own = username == me
    old = prompt_password(f"Current password for user '{username}': ") if own else None
    first = prompt_password(f"New password for user '{username}': ")
    second = prompt_password("Confirm password: ")
    if first != second:
        raise CliError("passwords do not match")
    target = session.get("/api/v1/me").get("user") if own else find_user(session, username)
    body: dict[str, Any] = {"password": salt_and_hash(first), "isHashed": True}
    if old is not None:
        body["oldPassword"] = salt_and_hash(old)
    session.post(f"/api/v1/users/{user_id(target, username)}/password", body)
    print(f"Password changed for user '{username}'")
    return 0


# ---- managing users (admin) --------------------------------------------------------------------
USER_HEADERS = ["ID", "Username", "Display Name", "Role", "Admin", "Active"]


def find_user(session: Session, username: str) -> dict[str, Any]:
    body = session.get(f"/api/v1/users/{quote(username, safe='')}/by-username")
    user = body.get("user") if isinstance(body, dict) else None
    if not isinstance(user, dict):
        raise CliError(f"user '{username}' not found")
    return user


def user_id(user: Any, username: str) -> int:
    if not isinstance(user, dict) or not isinstance(user.get("id"), int):
        raise CliError(f"the master sent no id for user '{username}'")
    return user["id"]


def user_row(u: dict[str, Any]) -> list[Any]:
    return [u.get("id"), u.get("username"), u.get("displayName") or "", u.get("role") or "",
            u.get("admin"), u.get("active")]


def cmd_list(args: argparse.Namespace) -> int:
    users = list(paged(session_for(args), "/api/v1/users", "users", page_size=1000))
    if args.json:
        print_json(users)
    else:
        print(render.table(USER_HEADERS, [user_row(u) for u in users]))
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    session = session_for(args)
    role = "admin" if args.admin else args.role
    password = ""
    if args.password:
        password = prompt_password(f"Password for new user '{args.username}': ")
        if prompt_password("Confirm password: ") != password:
            raise CliError("passwords do not match")
    body = {"user": {"username": args.username, "admin": role == "admin", "active": True, "role": role},
            "password": salt_and_hash(password), "isHashed": True}
    user = session.post("/api/v1/users", body).get("user") or {}
    if args.json:
        print_json(user)
    else:
        note = "" if password else " with an empty password (set one with det user change-password)"
        print(f"Created user '{args.username}' (id {user.get('id')}, role {user.get('role', role)}){note}")
    return 0


def _patch(args: argparse.Namespace, change: dict[str, Any], done: str) -> int:
    session = session_for(args)
    target = find_user(session, args.username)
    user = session.patch(f"/api/v1/users/{user_id(target, args.username)}", change).get("user") or {}
    if getattr(args, "json", False):
        print_json(user)
    else:
        print(done.format(name=args.username, role=user.get("role", "")))
    return 0


def cmd_activate(args: argparse.Namespace) -> int:
    return _patch(args, {"active": True}, "Activated user '{name}'")


def cmd_deactivate(args: argparse.Namespace) -> int:
    return _patch(args, {"active": False}, "Deactivated user '{name}'; their sessions have ended")


def cmd_set_role(args: argparse.Namespace) -> int:
    return _patch(args, {"role": args.role}, "User '{name}' now has role {role}")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("user", aliases=["u"], help="log in and manage your account")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("login", help="log in (prompts for the password; empty is allowed)")
    p.add_argument("username", nargs="?", metavar="USERNAME")
    p.set_defaults(func=cmd_login)
    p = sub.add_parser("logout", help="forget this master's token")
    p.set_defaults(func=cmd_logout)
    p = sub.add_parser("whoami", help="the user the stored token belongs to")
    p.set_defaults(func=cmd_whoami)
    p = sub.add_parser("change-password",
                       help="set a new password (prompts for your current one when it is yours, then twice)")
    p.add_argument("username", nargs="?", metavar="USERNAME")
    p.set_defaults(func=cmd_change_password)
    p = sub.add_parser("list", aliases=["ls"], help="list users")
    p.add_argument("--json", action="store_true", help="print the users as JSON")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("create", help="create a user (admin)")
    p.add_argument("username", metavar="USERNAME")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--admin", action="store_true", help="give the user the admin role")
    how.add_argument("--role", choices=ROLES, default="user", help="the user's role (default: user)")
    p.add_argument("--password", action="store_true", help="prompt for the new user's password (default: empty)")
    p.add_argument("--json", action="store_true", help="print the new user as JSON")
    p.set_defaults(func=cmd_create)
    for name, func, text in (("activate", cmd_activate, "let a user sign in again (admin)"),
                             ("deactivate", cmd_deactivate, "stop a user signing in and end their sessions (admin)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("username", metavar="USERNAME")
        p.add_argument("--json", action="store_true", help="print the changed user as JSON")
        p.set_defaults(func=func)
    p = sub.add_parser("set-role", help="change a user's role (admin)")
    p.add_argument("username", metavar="USERNAME")
    p.add_argument("role", choices=ROLES, metavar="ROLE", help=f"one of: {', '.join(ROLES)}")
    p.add_argument("--json", action="store_true", help="print the changed user as JSON")
    p.set_defaults(func=cmd_set_role)
