"""The unmodified Determined 0.38.1 CLI and SDK on this master's cluster, admin, workspace and job calls.

One cluster (``det deploy local up``: a master and one agent of two slots) serves every command:
job, slot, user, master config/logs, workspace, project, token and template commands of the real
``det``, then the SDK's ``list_workspaces``/``get_user_by_name``/``list_users`` in the client's own
interpreter. Each command's output is checked, not only its exit code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import EXAMPLE

# PostgreSQL: the real Determined client drives the master as Determined's users run it, on PostgreSQL.
pytestmark = [pytest.mark.e2e, pytest.mark.one_database("postgres")]

PASSWORD = "Passw0rdX"  # meets the client's complexity check
NEW_PASSWORD, SDK_PASSWORD = "Newpassw0rd", "Sdkpassw0rd"


def rows(table: str) -> list[list[str]]:
    """The cells of the client's plain table (header and rule left out)."""
    lines = [line for line in table.splitlines() if "|" in line]
    return [[cell.strip() for cell in line.split("|")] for line in lines[1:]]


def signs_in(master: str, username: str, password: str) -> bool:
    """A login of its own (the client's token store would answer from its cache)."""
    body = json.dumps({"username": username, "password": password, "isHashed": False}).encode()
    request = urllib.request.Request(f"{master}/api/v1/auth/login", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except urllib.error.HTTPError as e:
        assert e.code in (401, 403), e.code
        return False


def test_real_client_cluster_admin_workspace_job_calls(local_cluster, determined_cli, determined_venv, tmp_path):
    cluster = local_cluster(agents=1, slots=2)
    home = tmp_path / "home"
    home.mkdir()
    base = {**os.environ, "HOME": str(home), "DET_MASTER": cluster.url, "XDG_CONFIG_HOME": str(home / ".config")}
    as_admin = {**base, "DET_USER": "admin", "DET_PASS": ""}

    def det(*args: str, env: dict | None = None, ok: bool = True, input: str | None = None
            ) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(determined_cli), *args], capture_output=True, text=True, env=env or as_admin,
                              timeout=120, input=input)
        if ok:
            assert proc.returncode == 0, f"det {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    # det job list: the resource pools' every required field, then the (empty) queue.
    header = det("job", "list").stdout.splitlines()[0]
    assert "Priority" in header and "Weight" not in header, header  # the pool's scheduler: priority

    # det slot list / disable / enable (admin only).
    agents = json.loads(det("agent", "list", "--json").stdout)
    agent_id = agents[0]["id"]
    slots = json.loads(det("slot", "list", "--json").stdout)
    assert [(s["slot_id"], s["enabled"], s["allocation_id"]) for s in slots] == [("0", True, "FREE"),
                                                                                  ("1", True, "FREE")]
    assert f"Disabled slot 0 of agent {agent_id}" in det("slot", "disable", agent_id, "0").stdout
    slots = json.loads(det("slot", "list", "--json").stdout)
    assert [s["enabled"] for s in slots] == [False, True]
    as_user = {**base, "DET_USER": "determined", "DET_PASS": ""}
    refused = det("slot", "enable", agent_id, "0", env=as_user, ok=False)
    assert refused.returncode != 0 and "may not administer" in refused.stderr, refused.stderr
    assert f"Enabled slot 0 of agent {agent_id}" in det("slot", "enable", agent_id, "0").stdout
    assert [s["enabled"] for s in json.loads(det("slot", "list", "--json").stdout)] == [True, True]

    # det user create / list / deactivate / activate.
    det("user", "create", "nora", "--password", PASSWORD)
    assert "nora" in det("user", "list").stdout
    det("user", "deactivate", "nora")
    assert "nora" not in det("user", "list").stdout
    assert "nora" in det("user", "list", "--all").stdout
    det("user", "activate", "nora")
    users = {row[1]: row for row in rows(det("user", "list").stdout)}
    assert (users["nora"][3], users["nora"][4]) == ("False", "True"), users  # Admin, Active

    # det user change-password: the client sends no old password; nora has just signed in, so it stands in.
    as_nora = {**base, "DET_USER": "nora", "DET_PASS": PASSWORD}
    det("user", "change-password", env=as_nora, input=f"{NEW_PASSWORD}\n{NEW_PASSWORD}\n")
    assert signs_in(cluster.url, "nora", NEW_PASSWORD) and not signs_in(cluster.url, "nora", PASSWORD)

    # det master config (secrets masked) and det master logs (admin only).
    config = yaml.safe_load(det("master", "config").stdout)
    assert config["security"]["join_token"] == "********"
    join_token = (Path(cluster.data_dir) / "join-token").read_text().strip() if (
        Path(cluster.data_dir) / "join-token").exists() else None
    if join_token:
        assert join_token not in json.dumps(config)
    assert config["resource_pools"][0]["pool_name"] == "default"
    logs = det("master", "logs", "--tail", "50").stdout.splitlines()
    assert 0 < len(logs) <= 50 and all(re.match(r"^\S+Z \[(INFO|WARNING|ERROR)\]: ", line) for line in logs), logs
    assert any("registered" in line for line in det("master", "logs").stdout.splitlines()), logs  # the agent's
    assert det("master", "logs", env=as_user, ok=False).returncode != 0

    # Workspaces and projects.
    assert [row[:3] for row in rows(det("workspace", "list").stdout)] == [["1", "Uncategorized", "1"]]
    created = det("workspace", "create", "vision", env=as_user).stdout
    assert "vision" in created
    described = json.loads(det("workspace", "describe", "vision", "--json").stdout)
    assert (described["name"], described["username"], described["numProjects"]) == ("vision", "determined", 0)
    project = json.loads(det("project", "create", "vision", "detection", "--description", "boxes", "--json",
                             env=as_user).stdout)
    assert (project["name"], project["description"], project["workspaceId"]) == (
        "detection", "boxes", described["id"])
    assert [row[2] for row in rows(det("project", "list", "vision").stdout)] == ["detection"]
    shown = det("project", "describe", "vision", "detection").stdout
    assert "detection" in shown and "Associated Experiments" in shown
    # A config naming a workspace/project that does not exist is refused, naming it.
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((EXAMPLE / "const.yaml").read_text()),
                                   "workspace": "vision", "project": "nope"}))
    refused = det("experiment", "create", str(bad), str(EXAMPLE), ok=False)
    assert refused.returncode != 0 and "project 'nope'" in refused.stderr + refused.stdout, refused.stderr

    # det token list: one's own sessions, no secret.
    tokens = det("token", "list", env=as_user).stdout
    assert "USER_SESSION" in tokens, tokens

    # det template set / list / describe.
    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump({"max_restarts": 3, "resources": {"priority": 7}}))
    assert "Set template cheap" in det("template", "set", "cheap", str(template), env=as_user).stdout
    assert "cheap" in det("template", "list").stdout
    assert "Uncategorized" in det("template", "list", "--details").stdout
    assert yaml.safe_load(det("template", "describe", "cheap").stdout) == {"max_restarts": 3,
                                                                          "resources": {"priority": 7}}
    # det e create --template: merged under the config (which wins where it speaks); unknown: refused.
    templated = tmp_path / "templated.yaml"
    templated.write_text(yaml.safe_dump({**yaml.safe_load((EXAMPLE / "const.yaml").read_text()), "max_restarts": 1}))
    created = det("experiment", "create", "--paused", "--template", "cheap", str(templated), str(EXAMPLE)).stdout
    exp_id = re.search(r"Created experiment (\d+)", created).group(1)
    shown = yaml.safe_load(det("experiment", "config", exp_id).stdout)
    assert (shown["resources"]["priority"], shown["max_restarts"]) == (7, 1), shown
    unknown = det("experiment", "create", "--paused", "--template", "nope", str(templated), str(EXAMPLE), ok=False)
    assert unknown.returncode != 0 and "nope" in unknown.stderr + unknown.stdout, unknown.stderr

    # The SDK, in the client's own interpreter.
    script = f"""
import json
from determined.experimental import client
client.login(master={cluster.url!r}, user="admin", password="")
nora = client.get_user_by_name("nora")
print(json.dumps({{
    "workspaces": sorted(w.name for w in client.list_workspaces()),
    "nora": [nora.username, nora.active, nora.admin],
    "users": sorted(u.username for u in client.list_users()),
}}))
as_nora = client.Determined({cluster.url!r}, user="nora", password={NEW_PASSWORD!r})
as_nora.get_user_by_name("nora").change_password({SDK_PASSWORD!r})  # the SDK's own, right after login
"""
    proc = subprocess.run([str(determined_venv / "bin" / "python"), "-c", script], capture_output=True, text=True,
                          env=base, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sdk = json.loads(proc.stdout.strip().splitlines()[0])
    assert signs_in(cluster.url, "nora", SDK_PASSWORD) and not signs_in(cluster.url, "nora", NEW_PASSWORD)
    assert sdk["workspaces"] == ["Uncategorized", "vision"]
    assert sdk["nora"] == ["nora", True, False]
    assert {"admin", "determined", "nora"} <= set(sdk["users"])
