"""`det resource-pool list` (alias `det rp ls`) from `GET /api/v1/resource-pools`.

`--json` prints the plain `resourcePools` list.
"""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.cli import render
from controlplane.cli.common import print_json, session_for
from controlplane.common.timeutil import short_duration


def scheduler_name(value: object) -> str:
    """'SCHEDULER_TYPE_FAIR_SHARE' -> 'fair_share' (the name a pool's YAML uses)."""
    text = "" if value is None else str(value)
    return text[len("SCHEDULER_TYPE_"):].lower() if text.startswith("SCHEDULER_TYPE_") else text


def default_of(pool: dict[str, Any]) -> str:
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


def _usd(value: object) -> str:
    return f"${value:g}" if isinstance(value, (int, float)) and value > 0 else "-"


def shape_row(sh: dict[str, Any]) -> list[Any]:
    """One instance type of a pool: slots, GPU, list prices ("-": unknown) and live instances."""
    running = f"{sh.get('count', 0)}" + (f" ({sh['spotCount']} spot)" if sh.get("spotCount") else "")
    name = sh["instanceType"] + ("" if sh.get("configured", True) else " (not configured)")
    return [name, sh.get("slots") or "-", sh.get("gpuModel") or "-", _usd(sh.get("usdPerHour")),
            _usd(sh.get("spotUsdPerHour")), running]


def cmd_describe(args: argparse.Namespace) -> int:
    info = session_for(args).get(f"/api/v1/resource-pools/{args.pool}/autoscaler")
    if args.json:
        print_json(info)
        return 0
    limits = (f", min {info['minInstances']} / max {info['maxInstances']} instances"
              if info.get("autoscaling") else " (no autoscaling)")
    print(f"Pool {info['pool']}: provider {info.get('provider') or 'static'}{limits}; spent ${info['spentUsd']:.2f}")
    shapes = info.get("shapes") or []
    burn = info.get("burn")
    if burn is None:  # a master from before mixed shapes: `shapes` was the live instances by market
        burn, shapes = [sh for sh in shapes if "pricePerHour" in sh], [sh for sh in shapes if "slots" in sh]
    if shapes:
        print(render.table(["Type", "Slots", "GPU", "$/h on-demand", "$/h spot", "Running"],
                           [shape_row(sh) for sh in shapes]))
    if burn:
        now = ", ".join(f"{sh['count']} × {sh['instanceType']} ({'spot' if sh['spot'] else 'on-demand'}, "
                        f"${sh['pricePerHour']:g}/h)" for sh in burn)
        print(f"Burning ${info.get('burnUsdPerHour', 0):.2f}/h now: {now}")
    rows = [[i["id"], i["state"], i["instanceType"], i["zone"], "spot" if i["spot"] else "on-demand",
             f"{i['ageSeconds']:.0f}s", i["agentId"] or "-", f"${i['costUsd']:.4f}", i["reason"]]
            for i in info.get("instances") or []]
    if rows:
        print(render.table(["Instance", "State", "Type", "Zone", "Market", "Age", "Agent", "Cost", "Reason"], rows))
    for title, lines in (("Plan", info.get("plan") or []), ("Blocked", [f"{b['key']}: {b['reason']}" for b in
                                                                       info.get("blocked") or []]),
                         ("Launch errors", info.get("lastErrors") or [])):
        if lines:
            print(f"{title}:")
            for line in lines:
                print(f"  - {line}")
    if info.get("backoff"):
        b = info["backoff"]
        print(f"Backing off after {b['failures']} launch error(s): {b['lastError']}")
    if info.get("consolidation"):
        print_consolidation(info["consolidation"])
    return 0


def print_consolidation(c: dict[str, Any]) -> None:
    """Consolidation's settings, its moves and what they are estimated to have saved, then the
    latest moves with their reasons."""
    n, most = c.get("moveCount", 0), c.get("maxMovesPerTrial", 0)
    settings = "off"
    if c.get("enabled"):
        settings = (f"on, at most {most} move{'s' if most != 1 else ''} per trial, "
                    f"move cost {short_duration(c['moveCostS'])}")
        if "minRuntimeS" in c:
            settings += f", onto free slots after {short_duration(c['minRuntimeS'])} of running"
    print(f"Consolidation: {settings}; {n} move{'s' if n != 1 else ''}, "
          f"estimated ${c.get('savedUsd', 0):.2f} saved")
    for m in c.get("moves") or []:
        print(f"  - {m['time']}: trial {m['trialId']} off {m['fromInstance']} -> {m['toAgent']}: {m['reason']}")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("resource-pool", aliases=["rp"], help="resource pools of the cluster")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list resource pools")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("describe", help="instances, cost, and what the autoscaler plans and why")
    p.add_argument("pool")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_describe)
