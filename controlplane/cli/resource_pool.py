"""`det resource-pool list` (alias `det rp ls`) from `GET /api/v1/resource-pools`.

`--json` prints the plain `resourcePools` list.
"""

from __future__ import annotations

import argparse

from controlplane.cli import render
from controlplane.cli.common import print_json, session_for


def scheduler_name(value: object) -> str:
    """'SCHEDULER_TYPE_FAIR_SHARE' -> 'fair_share' (the name a pool's YAML uses)."""
    text = "" if value is None else str(value)
    return text[len("SCHEDULER_TYPE_"):].lower() if text.startswith("SCHEDULER_TYPE_") else text


def default_of(pool: dict) -> str:
    return ", ".join(kind for kind, key in (("compute", "defaultComputePool"), ("aux", "defaultAuxPool"))
                     if pool.get(key))


def cmd_list(args: argparse.Namespace) -> int:
    pools = list(session_for(args).get("/api/v1/resource-pools").get("resourcePools") or [])
    if args.json:
        print_json(pools)
        return 0
    rows = [[p.get("name", ""), p.get("description", ""), scheduler_name(p.get("schedulerType")),
             p.get("numAgents", 0), f"{p.get('slotsUsed') or 0}/{p.get('slotsAvailable') or 0}", default_of(p)]
            for p in pools]
    print(render.table(["Name", "Description", "Scheduler", "Agents", "Slots (used/available)", "Default"], rows))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("resource-pool", aliases=["rp"], help="resource pools of the cluster")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list resource pools")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
