"""`det notebook`: JupyterLab on the cluster, served through the master's proxy.

A notebook's answer names its page, ``serviceAddress`` (``/proxy/<id>/lab``). On the master that
path is a link: for the notebook's owner (or an admin), signed in by bearer token or by the web
UI's session cookie (a navigation typed or from the master's own pages), it sends the browser on to
the same path on the notebook's own origin (``<notebook>.<proxy host>:<proxy_port>``, a host per
task) with a one-time ticket, which signs it in there for that notebook only.
`det notebook start` launches one, waits until it runs and the master says JupyterLab answers
(``isReady``), and prints the URL (master URL + ``serviceAddress``). Determined opens a browser
there; this client prints the URL only (``--no-browser`` is accepted and is what it does): open it
in a browser signed in to this master's web UI.
"""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.cli import command as ntsc


def cmd_start(args: argparse.Namespace) -> int:
    return ntsc.start_served(args)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("notebook", help="JupyterLab notebooks on the cluster (through the master)")
    parser.set_defaults(kind="notebook")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("start", help="start a notebook, wait until it serves, and print its URL (-d: its id)")
    ntsc.add_launch_flags(p, "notebook")
    p.add_argument("--no-browser", action="store_true", help="accepted: the URL is printed, no browser opened")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("open", help="print a running notebook's URL")
    p.add_argument("id", metavar="ID", type=ntsc.id_arg, help="the notebook's id (or a unique prefix)")
    p.set_defaults(func=ntsc.cmd_open_served)

    ntsc.add_common(sub, "notebook")
