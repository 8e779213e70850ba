"""`det cmd`, `det shell`, `det notebook` against the real master app (the routes' SQL: tests/controlplane/master).

No agent joins, so whatever is launched stays QUEUED; log lines are written beside the master,
into its database, as an agent's log shipping would.
"""

from __future__ import annotations

import io
import json
import re
import stat
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from controlplane.cli import command, shell
from controlplane.cli.errors import CliError
from controlplane.master.db.models import PaiJob, TaskLog
from controlplane.master.orchestration.pai_jobs import task_id
from tests.controlplane.cli.test_pai_commands import PaiMaster, header, table_rows

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def master(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, master_db_url: str) -> Iterator[PaiMaster]:
    with PaiMaster(tmp_path / "master", master_db_url) as m:
        monkeypatch.setenv("DET_MASTER", m.url)
        yield m


def launched(det, *argv: str) -> str:
    r = det(*argv)
    assert r.rc == 0, r.err
    assert UUID.fullmatch(r.out.strip()), r.out
    return r.out.strip()


def as_nora(master, monkeypatch) -> None:
    master.add_user("nora", "user")
    monkeypatch.setenv("DET_USER", "nora")
    monkeypatch.setenv("DET_PASS", "pw")


def kill_over_http(master, kind: str, task: str) -> None:
    requests.post(f"{master.url}/api/v1/{kind}s/{task}/kill", headers=master.login("determined"),
                  timeout=10).raise_for_status()


def test_run_detached_is_listed_queued_and_kill_terminates_it(master, det):
    cmd_id = launched(det, "cmd", "run", "-d", "--description", "say hi", "echo", "hi")
    r = det("cmd", "list")
    assert r.rc == 0, r.err
    assert header(r.out) == ["ID", "Description", "User", "State", "Exit Code", "Start Time"]
    rows = table_rows(r.out)
    assert [row[:5] for row in rows] == [[cmd_id, "say hi", "determined", "QUEUED", ""]]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+0000", rows[0][5])

    listed = json.loads(det("command", "ls", "--json").out)
    assert [(c["id"], c["state"], c["exitCode"], c["description"]) for c in listed] == [
        (cmd_id, "STATE_QUEUED", None, "say hi")]
    assert det("cmd", "list", "-q").out == f"{cmd_id}\n"
    r = det("cmd", "describe", cmd_id[:8], "--json")  # a unique prefix, as Determined takes
    assert r.rc == 0 and json.loads(r.out)["id"] == cmd_id

    r = det("cmd", "kill", cmd_id[:6])
    assert (r.rc, r.out) == (0, f"Killed command {cmd_id}\n"), r.err
    assert table_rows(det("cmd", "list").out)[0][3] == "TERMINATED"
    r = det("cmd", "logs", "-f", cmd_id)  # ended: the lines so far (none), then the end
    assert (r.rc, r.out) == (0, "")
    assert r.err.startswith(f"Command {cmd_id} ended: no exit code"), r.err

    r = det("cmd", "kill", "0" * 8 + "-0000-4000-8000-" + "0" * 12)
    assert (r.rc, r.err) == (1, f"Error: command {'0' * 8}-0000-4000-8000-{'0' * 12} not found\n")
    r = det("cmd", "kill", "abcdef")
    assert (r.rc, r.err) == (1, "Error: no command has an id starting with 'abcdef'\n")
    r = det("cmd", "kill", "x/y")
    assert r.rc == 2 and "expected an id (hexadecimal digits and dashes), got 'x/y'" in r.err
    assert det("shell", "list", "--json").out == "[]\n"  # kinds are apart


def test_another_user_cannot_kill_and_sees_it_only_with_all(master, det, monkeypatch):
    cmd_id = launched(det, "cmd", "run", "-d", "sleep", "100")
    other = launched(det, "cmd", "run", "-d", "sleep", "200")
    as_nora(master, monkeypatch)
    r = det("-u", "nora", "cmd", "kill", cmd_id, other)
    assert (r.rc, r.out) == (1, "")
    assert r.err == (f"Not killing command {other}\n"
                     f"Error: only the owner of command {cmd_id} or an admin may edit it\n")
    r = det("-u", "nora", "cmd", "kill", "--force", cmd_id, other)
    assert r.rc == 0 and r.out == ""
    assert r.err.count("Skipping command") == 2 and "only the owner of command" in r.err
    r = det("-u", "nora", "cmd", "list")
    assert r.rc == 0 and table_rows(r.out) == []
    r = det("-u", "nora", "cmd", "list", "--all")
    assert sorted(row[3] for row in table_rows(r.out)) == ["QUEUED", "QUEUED"]


def test_shell_is_opened_only_by_its_owner_and_only_when_running(master, det, monkeypatch):
    shell_id = launched(det, "shell", "start", "-d")
    mine = json.loads(det("shell", "list", "--json").out)
    assert [(s["id"], s["state"]) for s in mine] == [(shell_id, "STATE_QUEUED")]
    assert "PRIVATE KEY" in mine[0]["privateKey"] and mine[0]["hostPublicKey"].startswith("ssh-ed25519 ")
    r = det("shell", "open", shell_id)
    assert (r.rc, r.err) == (1, f"Error: shell {shell_id} is not running (QUEUED)\n")

    as_nora(master, monkeypatch)
    r = det("-u", "nora", "shell", "open", shell_id, "--", "echo", "hi")
    assert (r.rc, r.out) == (1, "")
    assert r.err == (f"Error: shell {shell_id} belongs to determined: the master gives its key only to its owner "
                     "or an admin, so you cannot open it\n")
    r = det("-u", "nora", "shell", "show_ssh_command", shell_id)
    assert r.rc == 1 and "belongs to determined" in r.err
    theirs = json.loads(det("-u", "nora", "shell", "list", "--all", "--json").out)
    assert [s["id"] for s in theirs] == [shell_id] and "privateKey" not in theirs[0]
    r = det("-u", "nora", "shell", "kill", shell_id)
    assert (r.rc, r.err) == (1, f"Error: only the owner of shell {shell_id} or an admin may edit it\n")


def test_shell_start_waits_and_fails_clearly_when_the_shell_ends(master, det, monkeypatch):
    calls = []

    def sleep(seconds: float) -> None:  # the shell is killed while the command waits for it
        calls.append(seconds)
        shells = requests.get(f"{master.url}/api/v1/shells", headers=master.login("determined"), timeout=10)
        kill_over_http(master, "shell", shells.json()["shells"][0]["id"])

    monkeypatch.setattr(command.time, "sleep", sleep)
    r = det("shell", "start", "--description", "box")
    assert (r.rc, r.out) == (1, "")
    shell_id = re.search(r"Shell (\S+): QUEUED", r.err).group(1)  # type: ignore[union-attr]
    assert r.err.startswith(f"Shell {shell_id}: QUEUED\nShell {shell_id}: TERMINATED\n"
                            f"Error: shell {shell_id} ended before it was running: "), r.err
    assert calls == [1.0]


def test_the_ssh_command_uses_the_shells_key_and_pins_its_host_key(cli_env, tmp_path):
    answer = {"id": "0b5c1d2e-0000-4000-8000-000000000001", "state": "STATE_RUNNING", "username": "determined",
              "addresses": [{"hostIp": "10.1.2.3", "hostPort": 40022}],
              "hostPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKey",
              "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"}
    argv, host, port = shell.ssh_command(answer, ["echo", "hi"])
    folder = tmp_path / "xdg" / "controlplane" / "shell-ssh" / answer["id"]
    assert (host, port) == ("10.1.2.3", 40022)
    assert argv == ["ssh", "-i", str(folder / "id_ed25519"), "-p", "40022", "-o", "IdentitiesOnly=yes",
                    "-o", f"UserKnownHostsFile={folder / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null",
                    "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR", "det@10.1.2.3", "echo", "hi"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "id_ed25519").stat().st_mode) == 0o600
    assert (folder / "id_ed25519").read_text() == answer["privateKey"]
    assert (folder / "known_hosts").read_text() == f"[10.1.2.3]:40022 {answer['hostPublicKey']}\n"

    with pytest.raises(CliError, match="sent no SSH address"):
        shell.ssh_command({**answer, "addresses": []}, [])


def test_bad_configs_name_the_field(master, det, tmp_path):
    r = det("cmd", "run", "-d", "--config", "resources.slots=-1", "echo", "hi")
    assert (r.rc, r.out) == (1, "")
    assert r.err == "Error: invalid config: resources.slots: an integer from 0 to 1024, got -1\n"
    # Determined's rule: a value with commas is a list; the master names the item it refuses
    r = det("cmd", "run", "-d", "--config", "environment.environment_variables=A=1,PAI_X=2", "true")
    assert r.rc == 1
    assert r.err.startswith("Error: invalid config: environment.environment_variables[1]: NAME=VALUE"), r.err
    r = det("shell", "start", "-d", "--config", "resources=1", "--config", "resources.slots=2")
    assert (r.rc, r.err) == (1, "Error: invalid config: resources: is not a mapping, cannot set resources.slots\n")
    r = det("cmd", "run", "-d", "--config", "noequals", "true")
    assert r.rc == 1 and "expected key.path=value" in r.err
    r = det("cmd", "run", "-d")
    assert (r.rc, r.err) == (1, "Error: no command to run: det cmd run [flags] COMMAND [ARG...] "
                                "(or entrypoint in --config-file)\n")
    r = det("cmd", "run", "-d", "--config-file", str(tmp_path / "nope.yaml"), "true")
    assert (r.rc, r.err) == (1, f"Error: cannot read config file {tmp_path / 'nope.yaml'}: No such file or "
                                "directory\n")
    (tmp_path / "bad.yaml").write_text("resources: [\n")
    r = det("notebook", "start", "-d", "--config-file", str(tmp_path / "bad.yaml"))
    assert r.rc == 1 and r.err.startswith(f"Error: invalid config: {tmp_path / 'bad.yaml'}: YAML syntax error")
    assert json.loads(det("cmd", "list", "--all", "--json").out) == []

    (tmp_path / "ok.yaml").write_text("description: from file\nentrypoint: [python3, -c, 'print(1)']\n"
                                      "resources: {slots: 0}\n")
    r = det("cmd", "run", "-d", "--config-file", str(tmp_path / "ok.yaml"),
            "--config", "environment.environment_variables=A=1,B=x y", "echo", "ignored")
    assert r.rc == 0 and UUID.fullmatch(r.out.strip()), r.err
    assert r.err == "Warning: the config's entrypoint runs; 'echo ignored' on the command line is ignored\n"
    cmd_id = r.out.strip()
    [listed] = json.loads(det("cmd", "list", "--json").out)
    assert (listed["id"], listed["description"]) == (cmd_id, "from file")

    async def spec(session) -> dict:
        return (await session.execute(select(PaiJob.spec).where(PaiJob.job_id == cmd_id))).scalar_one()

    sent = master.db(spec)
    assert (sent["taskRoles"][0]["command"], sent["taskRoles"][0]["gpuNumber"]) == ("python3 -c 'print(1)'", 0)
    assert sent["jobEnvs"] == {"A": "1", "B": "x y"}


def test_run_sends_the_context_and_follows_its_output(master, det, tmp_path, monkeypatch):
    ctx = tmp_path / "ctx"
    (ctx / "data").mkdir(parents=True)
    (ctx / "script.py").write_text("print('hi')\n")
    (ctx / "data" / "big.bin").write_bytes(b"\0" * 100)
    (ctx / ".detignore").write_text("data/\n")
    texts = ["first line\n", "no newline", " then more\n"]

    async def job_of(session) -> PaiJob:
        return (await session.execute(select(PaiJob).where(PaiJob.kind == "command"))).scalar_one()

    def sleep(seconds: float) -> None:  # while it follows: the task writes its lines and is killed
        async def add_logs(session) -> None:
            job = await job_of(session)
            for text in texts:
                session.add(TaskLog(task_id=task_id(job.id, "command", 0), allocation_id="", agent_id="a",
                                    stdtype="stdout", timestamp=datetime.now(UTC), log=text))
                await session.flush()

        master.db(add_logs)
        kill_over_http(master, "command", master.db(job_of).job_id)

    monkeypatch.setattr(command.time, "sleep", sleep)
    monkeypatch.setattr(command, "LOG_PAGE", 2)
    r = det("cmd", "run", "-c", str(ctx), "python3", "script.py", "--flag")
    job = master.db(job_of)
    assert r.rc == 1  # killed before it ran: no exit code of its own
    assert r.out == "first line\nno newline then more\n"
    assert r.err.startswith(f"Launched command (id: {job.job_id})\nCommand {job.job_id} ended: no exit code"), r.err
    assert job.spec["taskRoles"][0]["command"] == "python3 script.py --flag"
    with tarfile.open(fileobj=io.BytesIO(job.code), mode="r:*") as tar:
        names = sorted(Path(m.name).name for m in tar.getmembers() if m.isfile())
    assert names == ["script.py"]

    r = det("cmd", "logs", job.job_id, "--json")
    assert [json.loads(line)["log"] for line in r.out.splitlines()] == texts
    assert det("cmd", "logs", job.job_id).out == "".join(texts)


def test_exit_status_is_the_commands_own():
    assert [command.exit_status({"exitCode": c}) for c in (0, 3, 255, None, -9, 256, True)] == [0, 3, 255, 1, 1, 1, 1]


def test_notebook_start_detached_open_and_kill(master, det):
    nb_id = launched(det, "notebook", "start", "-d", "--no-browser")
    [nb] = json.loads(det("notebook", "list", "--json").out)
    assert (nb["id"], nb["state"], nb["serviceAddress"]) == (nb_id, "STATE_QUEUED", f"/proxy/{nb_id}/lab")
    r = det("notebook", "open", nb_id)
    assert (r.rc, r.err) == (1, f"Error: notebook {nb_id} is not running (QUEUED)\n")
    assert det("notebook", "kill", nb_id).out == f"Killed notebook {nb_id}\n"
    assert table_rows(det("notebook", "ls").out)[0][3] == "TERMINATED"
