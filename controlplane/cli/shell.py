"""`det shell`: an interactive shell on the cluster, reached with OpenSSH.

A shell is a task that waits; its SSH server (user ``det``) trusts a key the master made for it and
gives, in the shell's answer (``privateKey``), only to its owner or an admin. `det shell open`
writes that key 0600 into a 0700 folder under the auth store's directory with a known-hosts line
pinning the shell's ``hostPublicKey`` for ``[hostIp]:hostPort``, and runs
``ssh -i KEY -p PORT ... det@HOST [COMMAND...]`` in place of itself (``controlplane.cli.ssh_keys``).
`det shell start` launches one, waits until it runs, then opens it (``--detach``: prints its id).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from controlplane.cli import command as ntsc
from controlplane.cli import render, ssh_keys
from controlplane.cli.common import session_for
from controlplane.cli.errors import CliError
from controlplane.cli.session import Session

SSH_USER = "det"
PORT_WAIT_S = 30.0  # a shell that has just started: its SSH server may not listen yet


def ssh_command(shell: dict[str, Any], remote: list[str]) -> tuple[list[str], str, int]:
    """The ssh argv for this shell (its key and pinned host key written), its host and port;
    CliError naming what is missing (the caller is not its owner, it does not run, no address)."""
    shell_id = str(shell.get("id"))
    key_text = shell.get("privateKey")
    if not isinstance(key_text, str) or not key_text.strip():
        raise CliError(f"shell {shell_id} belongs to {shell.get('username') or 'another user'}: the master gives "
                       "its key only to its owner or an admin, so you cannot open it")
    state = str(shell.get("state") or "")
    if state != ntsc.RUNNING:
        raise CliError(f"shell {shell_id} is not running ({render.format_state(state) or 'no state'})")
    address = next((a for a in shell.get("addresses") or []
                    if isinstance(a, dict) and a.get("hostIp") and isinstance(a.get("hostPort"), int)), None)
    host_key = shell.get("hostPublicKey")
    if address is None or not isinstance(host_key, str) or not host_key.strip():
        raise CliError(f"shell {shell_id} runs, but the master sent no SSH address and host key for it")
    host, port = str(address["hostIp"]), int(address["hostPort"])
    folder = ssh_keys.private_folder("shell-ssh", shell_id)
    key = ssh_keys.write_key(folder, key_text)
    known = ssh_keys.write_known_hosts(folder, [ssh_keys.known_host_line(host, port, host_key)])
    return ssh_keys.ssh_argv(key, known, SSH_USER, host, port, remote), host, port


def open_shell(session: Session, shell_id: str, remote: list[str]) -> None:
    argv, host, port = ssh_command(ntsc.get_task(session, "shell", shell_id), remote)
    if not ssh_keys.wait_for_port(host, port, PORT_WAIT_S):
        print(f"Warning: the shell's SSH server at {host}:{port} does not answer yet; trying anyway",
              file=sys.stderr)
    ssh_keys.exec_ssh(argv)


def cmd_start(args: argparse.Namespace) -> int:
    session = session_for(args)
    shell = ntsc.launch(session, "shell", ntsc.launch_config(args), args.context)
    if args.detach:
        print(shell["id"])
        return 0
    try:
        ntsc.wait_running(session, "shell", shell["id"])
    except KeyboardInterrupt:
        print(f"\nThe shell goes on: det shell open {shell['id']} to open it, det shell kill {shell['id']} "
              "to stop it", file=sys.stderr)
        raise
    open_shell(session, shell["id"], ssh_keys.remote_command(args.remote_command))
    return 0  # not reached: ssh runs in place of this process


def cmd_open(args: argparse.Namespace) -> int:
    session = session_for(args)
    open_shell(session, ntsc.resolve_id(session, "shell", args.id), ssh_keys.remote_command(args.remote_command))
    return 0  # not reached


def cmd_show_ssh_command(args: argparse.Namespace) -> int:
    session = session_for(args)
    shell = ntsc.get_task(session, "shell", ntsc.resolve_id(session, "shell", args.id))
    print(ssh_keys.show(ssh_command(shell, ssh_keys.remote_command(args.remote_command))[0]))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("shell", help="interactive shells on the cluster (over SSH)")
    parser.set_defaults(kind="shell")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("start", help="start a shell, wait until it runs, and open it (-d: print its id)")
    ntsc.add_launch_flags(p, "shell")
    p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="run this in the shell instead of an interactive login (after --)")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("open", help="open a running shell of yours: det shell open ID [-- COMMAND...]")
    p.add_argument("id", metavar="ID", type=ntsc.id_arg, help="the shell's id (or a unique prefix)")
    p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="run this instead of an interactive shell")
    p.set_defaults(func=cmd_open)

    p = sub.add_parser("show_ssh_command", aliases=["show-ssh-command"],
                       help="write the shell's key and print the ssh command that opens it")
    p.add_argument("id", metavar="ID", type=ntsc.id_arg, help="the shell's id (or a unique prefix)")
    p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="a command to run")
    p.set_defaults(func=cmd_show_ssh_command)

    ntsc.add_common(sub, "shell")
