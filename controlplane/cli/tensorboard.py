"""`det tensorboard`: TensorBoard over experiments' metrics, served through the master's proxy.

`det tensorboard start EXPERIMENT_ID...` launches a TensorBoard task for those experiments, waits
until the master says TensorBoard answers (``isReady``) and prints its URL (``/proxy/<id>/``, for its
owner or an admin: on the master a link to the TensorBoard's own origin, as for notebooks); the task
keeps reading new reports while the experiments run and is stopped after its ``idle_timeout``
without traffic.
"""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.cli import command as ntsc


def cmd_start(args: argparse.Namespace) -> int:
    return ntsc.start_served(args, {"experimentIds": list(args.experiment_ids)})


def _experiment_id(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"an experiment id, got {text!r}")
    return int(text)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
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
    p.set_defaults(func=ntsc.cmd_open_served)

    ntsc.add_common(sub, "tensorboard")
