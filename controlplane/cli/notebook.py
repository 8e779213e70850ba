"""`det notebook`: JupyterLab on the cluster, served through the master's proxy.

A notebook's answer names its page, ``serviceAddress`` (``/proxy/<id>/lab``); the master passes
that path on to the task for its owner (or an admin), signed in by bearer token or by the web UI's
session cookie. `det notebook start` launches one, waits until it runs and JupyterLab answers
through the proxy, and prints the URL (master URL + ``serviceAddress``). Determined opens a browser
there; this client prints the URL only (``--no-browser`` is accepted and is what it does): open it
in a browser signed in to this master's web UI.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from controlplane.cli import command as ntsc
from controlplane.cli import render
from controlplane.cli.common import session_for
from controlplane.cli.errors import ApiError, CliError
from controlplane.cli.session import Session

READY_WAIT_S = 300.0  # JupyterLab's own start, after the task runs
STATUS_PATH = "api/status"  # Jupyter Server's: 200 JSON once it serves


def notebook_url(session: Session, notebook: dict[str, Any]) -> str:
    address = notebook.get("serviceAddress")
    if not isinstance(address, str) or not address.startswith("/"):
        raise CliError(f"the master sent no service address for notebook {notebook.get('id')}")
    return session.master.rstrip("/") + address


def wait_serving(session: Session, notebook_id: str, timeout_s: float = READY_WAIT_S,
                 interval: float = ntsc.POLL_S) -> bool:
    """True once JupyterLab answers ``/proxy/<id>/api/status`` through the master; False after
    ``timeout_s``; CliError if the notebook ends or the master refuses this user."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            session.request("GET", f"/proxy/{notebook_id}/{STATUS_PATH}").close()
            return True
        except ApiError as e:
            if e.status in (401, 403):
                raise
        task = ntsc.get_task(session, "notebook", notebook_id)
        if task.get("state") == ntsc.TERMINATED:
            raise CliError(f"notebook {notebook_id} ended before JupyterLab answered: "
                           f"{task.get('exitStatus') or 'no reason given'}")
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def cmd_start(args: argparse.Namespace) -> int:
    session = session_for(args)
    notebook = ntsc.launch(session, "notebook", ntsc.launch_config(args), args.context)
    if args.detach:
        print(notebook["id"])
        return 0
    try:
        notebook = ntsc.wait_running(session, "notebook", notebook["id"])
        if not wait_serving(session, notebook["id"]):
            print(f"Warning: JupyterLab does not answer through the master yet; see det notebook logs "
                  f"{notebook['id']}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nThe notebook goes on: det notebook open {notebook['id']} for its URL, det notebook kill "
              f"{notebook['id']} to stop it", file=sys.stderr)
        raise
    print("Jupyter Notebook is running at:", file=sys.stderr)
    print(notebook_url(session, notebook))
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    session = session_for(args)
    notebook = ntsc.get_task(session, "notebook", ntsc.resolve_id(session, "notebook", args.id))
    if notebook.get("state") != ntsc.RUNNING:
        raise CliError(f"notebook {notebook['id']} is not running "
                       f"({render.format_state(notebook.get('state')) or 'no state'})")
    print(notebook_url(session, notebook))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("notebook", help="JupyterLab notebooks on the cluster (through the master)")
    parser.set_defaults(kind="notebook")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("start", help="start a notebook, wait until it serves, and print its URL (-d: its id)")
    ntsc.add_launch_flags(p, "notebook")
    p.add_argument("--no-browser", action="store_true", help="accepted: the URL is printed, no browser opened")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("open", help="print a running notebook's URL")
    p.add_argument("id", metavar="ID", type=ntsc.id_arg, help="the notebook's id (or a unique prefix)")
    p.set_defaults(func=cmd_open)

    ntsc.add_common(sub, "notebook")
