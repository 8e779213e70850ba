"""`det agent list|enable|disable` and `det slot list`.

The lists come from `GET /api/v1/agents`, every page of it (offset/limit); an agent lost past its
reconnect window is left out unless `--all` (`all=true`). `--json` prints a plain list (agents,
or one object per slot) so scripts can `len()` it. Each agent's `environments` are the task
environments it offers (what `environment.image` may name), its `instanceType` the cloud
instance type it reported (empty when unknown). `enable` is `POST /api/v1/agents/{id}/enable` (no body);
`disable` is `POST /api/v1/agents/{id}/disable` with `{"drain": true|false}`.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from controlplane.cli import render
from controlplane.cli.common import print_json, session_for

PAGE = 1000
MAX_PAGES = 10_000  # a master that keeps answering full pages cannot keep the CLI forever


def _agents(args: argparse.Namespace) -> list[dict[str, Any]]:
    session = session_for(args)
    out: list[dict[str, Any]] = []
    for _ in range(MAX_PAGES):
        params = {"offset": len(out), "limit": PAGE, **({"all": "true"} if getattr(args, "all", False) else {})}
        body = session.get("/api/v1/agents", params)
        rows = [a for a in body.get("agents") or [] if isinstance(a, dict)]
        out.extend(rows)
        total = (body.get("pagination") or {}).get("total")
        if not rows or not isinstance(total, int) or len(out) >= total:
            break
    return out


def cmd_agent_list(args: argparse.Namespace) -> int:
    agents = _agents(args)
    if args.json:
        print_json(agents)
        return 0
    rows = []
    for a in agents:
        slots = a.get("slots") or {}
        busy = sum(1 for s in slots.values() if isinstance(s, dict) and s.get("container"))
        rows.append([a.get("id"), render.format_time(a.get("registeredTime")), a.get("connected", ""),
                     len(slots), busy, ", ".join(a.get("resourcePools") or []), a.get("enabled", ""),
                     a.get("draining", ""), ", ".join(a.get("addresses") or []),
                     ", ".join(str(e) for e in a.get("environments") or []), a.get("instanceType") or ""])
    print(render.table(["Agent ID", "Registered Time", "Connected", "Slots", "Containers", "Resource Pool",
                        "Enabled", "Draining", "Addresses", "Environments", "Instance Type"], rows))
    return 0


def cmd_agent_enable(args: argparse.Namespace) -> int:
    session_for(args).post(f"/api/v1/agents/{quote(args.agent_id, safe='')}/enable")
    print(f"Enabled agent {args.agent_id}")
    return 0


def cmd_agent_disable(args: argparse.Namespace) -> int:
    session_for(args).post(f"/api/v1/agents/{quote(args.agent_id, safe='')}/disable", {"drain": bool(args.drain)})
    how = "draining: running work finishes" if args.drain else "running work is preempted and moves elsewhere"
    print(f"Disabled agent {args.agent_id} ({how})")
    return 0


def slot_rows(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for a in agents:
        slots = a.get("slots") or {}
        for key in sorted(slots, key=lambda k: (len(str(k)), str(k))):
            s = slots[key] or {}
            device = s.get("device") or {}
            container = s.get("container") or {}
            out.append({"agentId": a.get("id"), "resourcePool": ", ".join(a.get("resourcePools") or []),
                        "slotId": s.get("id", key), "enabled": s.get("enabled"), "draining": s.get("draining"),
                        "allocationId": container.get("id"), "type": device.get("type"),
                        "device": device.get("brand") or ""})
    return out


def cmd_slot_list(args: argparse.Namespace) -> int:
    slots = slot_rows(_agents(args))
    if args.json:
        print_json(slots)
        return 0
    rows = [[s["agentId"], s["resourcePool"], s["slotId"], s["enabled"], s["draining"], s["allocationId"] or "FREE",
             render.format_state(str(s["type"] or "")).replace("TYPE_", ""), s["device"]] for s in slots]
    print(render.table(["Agent ID", "Resource Pool", "Slot ID", "Enabled", "Draining", "Allocation ID", "Type",
                        "Device Description"], rows))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("agent", aliases=["a"], help="agents of the cluster")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list agents")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="also agents lost past their reconnect window")
    p.set_defaults(func=cmd_agent_list)
    p = sub.add_parser("enable", help="let an agent take new work again")
    p.add_argument("agent_id", metavar="AGENT_ID")
    p.set_defaults(func=cmd_agent_enable)
    p = sub.add_parser("disable", help="stop scheduling work on an agent")
    p.add_argument("agent_id", metavar="AGENT_ID")
    p.add_argument("--drain", action="store_true", help="let running work finish instead of preempting it")
    p.set_defaults(func=cmd_agent_disable)

    parser = subparsers.add_parser("slot", aliases=["s"], help="slots of the cluster's agents")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list slots")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_slot_list)
