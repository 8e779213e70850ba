"""The ``cli`` group, first part: the cluster, master and version; users and tokens; workspaces,
projects and templates (the template that experiment T is created from later)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from benchmarks.determined_client.cluster import Master, RealDet
from benchmarks.determined_client.scoreboard import Scoreboard, expect, need, rows
from benchmarks.determined_client.settings import NEW_PASSWORD, PASSWORD


def run_admin_checks(board: Scoreboard, det: RealDet, master: Master, work: Path, S: dict[str, Any]) -> None:
    g = "cli"

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    # Cluster, master and version.
    def version() -> None:
        out = det("version").stdout
        found = yaml.safe_load(out)
        expect(found["client"]["version"] == "0.38.1", f"client version {found.get('client')}")
        expect(found["master"]["version"] == "0.38.1" and found["master"].get("cluster_id"),
               f"master section {found.get('master')}")
    check("version", version)

    def master_info() -> None:
        info = json.loads(det("master", "info", "--json").stdout)
        expect(info.get("version") == "0.38.1" and info.get("clusterId"), f"info {str(info)[:200]}")
    check("master info --json", master_info)

    def master_config() -> None:
        config = yaml.safe_load(det("master", "config").stdout)
        expect(isinstance(config, dict) and "db" in config and "checkpoint_storage" in config,
               f"config keys {sorted(config) if isinstance(config, dict) else config}")
    check("master config", master_config)

    def master_logs() -> None:
        lines = [ln for ln in det("master", "logs", "--tail", "5").stdout.splitlines() if ln.strip()]
        expect(0 < len(lines) <= 5, f"{len(lines)} lines for --tail 5")
    check("master logs --tail 5", master_logs)

    def agent_list() -> None:
        agents = json.loads(det("agent", "list", "--json").stdout)
        ids = sorted(a["id"] for a in agents)
        expect(len(ids) == 2 and all(a.get("enabled", True) for a in agents), f"agents {ids}")
        S["agents"] = ids
    check("agent list --json", agent_list)

    def agent_enabled(agent: str) -> bool:
        return bool(next(a for a in json.loads(det("agent", "list", "--json").stdout) if a["id"] == agent)["enabled"])

    def agent_disable() -> None:
        agent = need(S.get("agents"), "the agent list")[1]
        det("agent", "disable", agent)
        expect(not agent_enabled(agent), "agent still enabled after disable")
        det("agent", "enable", agent)
        expect(agent_enabled(agent), "agent still disabled after enable")
    check("agent disable / enable", agent_disable)

    def slots() -> list[tuple[str, str, bool]]:
        return [(s["agent_id"], str(s["slot_id"]), bool(s["enabled"])) for s in
                json.loads(det("slot", "list", "--json").stdout)]

    def slot_list() -> None:
        found = slots()
        expect(len(found) == 4 and all(e for _, _, e in found), f"slots {found}")
    check("slot list --json", slot_list)

    def slot_disable() -> None:
        agent = need(S.get("agents"), "the agent list")[0]
        det("slot", "disable", agent, "1")
        expect((agent, "1", False) in slots(), "slot still enabled")
        det("slot", "enable", agent, "1")
        expect((agent, "1", True) in slots(), "slot still disabled")
    check("slot disable / enable", slot_disable)

    def rp_bindings() -> None:
        out = det("resource-pool", "bindings", "list-workspaces", "default").stdout
        expect("Failed" not in out, out[-200:])
    check("resource-pool bindings list-workspaces", rp_bindings)

    # Users and tokens.
    def whoami() -> None:
        out = det("user", "whoami").stdout
        expect("'admin'" in out, out)
    check("user whoami", whoami)

    def user_create() -> None:
        det("user", "create", "scorer", "--password", PASSWORD)
        expect("scorer" in [r[1] for r in rows(det("user", "list").stdout)], "scorer not in user list")
    check("user create --password", user_create)

    def user_list() -> None:
        names = [r[1] for r in rows(det("user", "list").stdout)]
        expect({"admin", "determined"} <= set(names), f"users {names}")
    check("user list", user_list)

    def user_login() -> None:
        det("user", "login", "scorer", user=None, input=f"{PASSWORD}\n")
        out = det("user", "whoami", user=None).stdout
        expect("'scorer'" in out, f"whoami after login: {out}")
    check("user login (password on stdin)", user_login)

    def change_password() -> None:
        det("user", "change-password", user=None, input=f"{NEW_PASSWORD}\n{NEW_PASSWORD}\n")
        r = requests.post(f"{det.url}/api/v1/auth/login", json={"username": "scorer", "password": NEW_PASSWORD},
                          timeout=30)
        expect(r.status_code == 200, f"login with the new password: {r.status_code}")
    check("user change-password (stdin)", change_password)

    def logout() -> None:
        det("user", "logout", user=None)
        out = det("user", "whoami", user=None).stdout
        expect("'scorer'" not in out, f"still signed in: {out}")
    check("user logout", logout)

    def user_deactivate() -> None:
        det("user", "deactivate", "scorer")
        expect("scorer" not in [r[1] for r in rows(det("user", "list").stdout)], "scorer still listed")
        expect("scorer" in [r[1] for r in rows(det("user", "list", "--all").stdout)], "scorer not in --all")
        det("user", "activate", "scorer")
        users = {r[1]: r for r in rows(det("user", "list").stdout)}
        expect("scorer" in users and users["scorer"][4] == "True", f"scorer row {users.get('scorer')}")
    check("user deactivate / list --all / activate", user_deactivate)

    def user_edit() -> None:
        out = det("user", "edit", "scorer", "--display-name", "Score Bot").stdout
        users = {r[1]: r for r in rows(det("user", "list").stdout)}
        expect(users.get("scorer", [""] * 3)[2] == "Score Bot", f"after edit ({out.strip()}): {users.get('scorer')}")
    check("user edit --display-name", user_edit)

    def token_list() -> None:
        out = det("token", "list").stdout
        expect("USER_SESSION" in out or "ACCESS_TOKEN" in out, out[-300:])
    check("token list", token_list)

    # Workspaces, projects, templates.
    def workspace_create() -> None:
        out = det("workspace", "create", "score-ws").stdout
        expect("score-ws" in out, out[-300:])
        det("workspace", "create", "score-tmp")
    check("workspace create", workspace_create)

    def workspace_list() -> None:
        names = [r[1] for r in rows(det("workspace", "list").stdout)]
        expect({"Uncategorized", "score-ws", "score-tmp"} <= set(names), f"workspaces {names}")
    check("workspace list", workspace_list)

    def workspace_describe() -> None:
        ws = json.loads(det("workspace", "describe", "score-ws", "--json").stdout)
        expect(ws.get("name") == "score-ws" and ws.get("username") == "admin", str(ws)[:300])
    check("workspace describe --json", workspace_describe)

    def project_create() -> None:
        project = json.loads(det("project", "create", "score-ws", "score-proj", "--description", "scored",
                                 "--json").stdout)
        expect(project.get("name") == "score-proj" and project.get("description") == "scored", str(project)[:300])
        det("project", "create", "score-ws", "score-tmp-proj")
        S["project_id"] = project["id"]
    check("project create --json", project_create)

    def project_list() -> None:
        names = [r[2] for r in rows(det("project", "list", "score-ws").stdout)]
        expect({"score-proj", "score-tmp-proj"} <= set(names), f"projects {names}")
    check("project list", project_list)

    def project_delete() -> None:
        det("project", "delete", "score-ws", "score-tmp-proj", "--yes")
        names = [r[2] for r in rows(det("project", "list", "score-ws").stdout)]
        expect("score-tmp-proj" not in names, f"projects {names}")
    check("project delete --yes", project_delete)

    def workspace_archive() -> None:
        det("workspace", "archive", "score-tmp")
        ws = json.loads(det("workspace", "describe", "score-tmp", "--json").stdout)
        expect(ws.get("archived") is True, f"archived: {ws.get('archived')}")
    check("workspace archive", workspace_archive)

    def workspace_delete() -> None:
        out = det("workspace", "delete", "score-tmp", "--yes").stdout
        names = [r[1] for r in rows(det("workspace", "list").stdout)]
        expect("score-tmp" not in names, f"still listed after: {out.strip()}")
    check("workspace delete --yes", workspace_delete)

    template = work / "configs" / "template.yaml"
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(yaml.safe_dump({"max_restarts": 3, "resources": {"priority": 7},
                                        "environment": {"environment_variables": ["FROM_TEMPLATE=1"]}}))

    def template_set() -> None:
        out = det("template", "set", "score-tpl", str(template)).stdout
        expect("score-tpl" in out, out)
        expect("score-tpl" in det("template", "list").stdout, "score-tpl not listed")
    check("template set / list", template_set)

    def template_describe() -> None:
        shown = yaml.safe_load(det("template", "describe", "score-tpl").stdout)
        expect(shown.get("max_restarts") == 3 and shown.get("resources", {}).get("priority") == 7, str(shown))
    check("template describe", template_describe)
