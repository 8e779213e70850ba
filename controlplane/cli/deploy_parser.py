"""`det deploy`: its targets and commands (`aws`, `gcp`; `local up|down` and Determined's local verbs)."""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.cli import deploy_determined
from controlplane.cli.deploy import cmd_down, cmd_up
from controlplane.cli.deploy_cloud import register_targets as register_cloud_targets


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("deploy", help="run a cluster")
    targets = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    register_cloud_targets(targets)  # aws, gcp
    local = targets.add_parser("local", help="a master and agents as local processes")
    sub = local.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("up", help="start a local master and agents (on a recorded cluster: start again only "
                                  "the master or agents that died; never stops a process)")
    p.add_argument("--port", type=int, default=None, help="master port (default 8080)")
    p.add_argument("--agents", type=int, default=1, help="number of agents (default 1)")
    p.add_argument("--slots-per-agent", type=int, default=1, help="slots each agent offers (default 1)")
    p.add_argument("--data-dir", default=".det-local", help="state, logs and checkpoints (default .det-local)")
    p.add_argument("--master-config", metavar="FILE", help="master.yaml settings merged over the defaults")
    p.add_argument("--autoscale", action="store_true",
                   help="start no agents: the master launches up to --agents local agents on demand "
                        "(the `local` provider) and stops them when idle")
    p.add_argument("--idle-period", default="15s", help="with --autoscale: idle time before an agent goes")
    p.add_argument("--agent-environment", action="append", default=[], metavar="NAME=PATH",
                   help="a task environment every agent offers: environment.image NAME runs with this "
                        "virtualenv (or Python interpreter) first on PATH (repeatable; det-agent --environment)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop the local master and agents (only processes proven to be this cluster's)")
    p.add_argument("--data-dir", default=".det-local")
    p.set_defaults(func=cmd_down)

    deploy_determined.register(sub)
