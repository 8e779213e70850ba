"""`det tensorboard`: TensorBoard over experiments' metrics, served through the master's proxy.

`det tensorboard start EXPERIMENT_ID...` launches a TensorBoard task for those experiments, waits
until TensorBoard answers through the master (``/proxy/<id>/``, for its owner or an admin) and
prints its URL; the task keeps reading new reports while the experiments run and is stopped after
its ``idle_timeout`` without traffic.
"""

from __future__ import annotations

import argparse
import sys
import time

from controlplane.cli import command as ntsc
from controlplane.cli import render
from controlplane.cli.common import session_for
from controlplane.cli.errors import ApiError, CliError
from controlplane.cli.session import Session

READY_WAIT_S = 300.0
STATUS_PATH = "data/environment"  # TensorBoard's: 200 JSON once it serves


def url_of(session: Session, board: dict) -> str:
    address = board.get("serviceAddress")
    if not isinstance(address, str) or not address.startswith("/"):
        raise CliError(f"the master sent no service address for TensorBoard {board.get('id')}")
    return session.master.rstrip("/") + address


def wait_serving(session: Session, board_id: str, timeout_s: float = READY_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            session.request("GET", f"/proxy/{board_id}/{STATUS_PATH}").close()
            return True
        except ApiError as e:
            if e.status in (401, 403):
                raise
        board = ntsc.get_task(session, "tensorboard", board_id)
        if board.get("state") == ntsc.TERMINATED:
            raise CliError(f"TensorBoard {board_id} ended before it answered: {board.get('exitStatus') or 'no reason'}")
        if time.monotonic() >= deadline:
            return False
        time.sleep(ntsc.POLL_S)


def cmd_start(args: argparse.Namespace) -> int:
    session = session_for(args)
    board = ntsc.launch(session, "tensorboard", ntsc.launch_config(args), args.context,
                        {"experimentIds": list(args.experiment_ids)})
    if args.detach:
        print(board["id"])
        return 0
    board = ntsc.wait_running(session, "tensorboard", board["id"])
    if not wait_serving(session, board["id"]):
        print(f"Warning: TensorBoard does not answer through the master yet; see det tensorboard logs "
              f"{board['id']}", file=sys.stderr)
    print("TensorBoard is running at:", file=sys.stderr)
    print(url_of(session, board))
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    session = session_for(args)
    board = ntsc.get_task(session, "tensorboard", ntsc.resolve_id(session, "tensorboard", args.id))
    if board.get("state") != ntsc.RUNNING:
        raise CliError(f"TensorBoard {board['id']} is not running "
                       f"({render.format_state(board.get('state')) or 'no state'})")
    print(url_of(session, board))
    return 0


def _experiment_id(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"an experiment id, got {text!r}")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tensorboard", help="TensorBoard over experiments' metrics (through the master)")
    parser.set_defaults(kind="tensorboard")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("start", help="start a TensorBoard for experiments, wait until it serves, print its URL")
    p.add_argument("experiment_ids", metavar="EXPERIMENT_ID", nargs="+", type=_experiment_id)
    ntsc.add_launch_flags(p, "tensorboard")
    p.add_argument("--no-browser", action="store_true", help="accepted: the URL is printed, no browser opened")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("open", help="print a running TensorBoard's URL")
    p.add_argument("id", metavar="ID", type=ntsc.id_arg, help="the TensorBoard's id (or a unique prefix)")
    p.set_defaults(func=cmd_open)

    ntsc.add_common(sub, "tensorboard")
