"""The ``cli`` group, last part: commands on running work (experiments C and D of our sleeper trial:
their settings, job, task, trial kill, kill and delete), commands, shells and notebooks, and at the
end the removal of the template the first part set."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.determined_client.cluster import Master, RealDet
from benchmarks.determined_client.scoreboard import Fail, Scoreboard, created_id, expect, need, one_line, rows, wait_for
from benchmarks.determined_client.workloads import sleep_config


def run_live_work_checks(board: Scoreboard, det: RealDet, master: Master, work: Path, S: dict[str, Any]) -> None:
    g = "cli"

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    def exp_state(exp_id: int) -> str:
        return str(master.experiment(exp_id)["state"])

    # Running work: C (sleeps, the job and the trial commands), D (killed, then deleted).
    def create_sleepers() -> None:
        for key in ("C", "D"):
            cfg, context = sleep_config(work, f"score-cli-{key.lower()}")
            S[key] = created_id(det("experiment", "create", str(cfg), str(context)).stdout)
        trial = master.wait_running(S["C"], 300)
        S["TC"] = trial["id"]
    # (no check of its own: `experiment create` is scored above; a failure shows in what needs C)
    try:
        create_sleepers()
    except Exception as e:  # noqa: BLE001 (the checks that need C and D say so)
        print(f"  [cli] note: the running experiments could not be set up: {one_line(str(e))}", flush=True)

    def set_priority() -> None:
        c = need(S.get("C"), "running experiment C")
        det("experiment", "set", "priority", str(c), "42")
        expect(yaml.safe_load(det("experiment", "config", str(c)).stdout)["resources"].get("priority") == 42,
               "priority not 42 in the config")
    check("experiment set priority", set_priority)

    def set_weight() -> None:
        c = need(S.get("C"), "running experiment C")
        det("experiment", "set", "weight", str(c), "2")
        expect(float(yaml.safe_load(det("experiment", "config", str(c)).stdout)["resources"].get("weight")) == 2.0,
               "weight not 2 in the config")
    check("experiment set weight", set_weight)

    def set_max_slots() -> None:
        c = need(S.get("C"), "running experiment C")
        det("experiment", "set", "max-slots", str(c), "1")
        expect(yaml.safe_load(det("experiment", "config", str(c)).stdout)["resources"].get("max_slots") == 1,
               "max_slots not 1 in the config")
    check("experiment set max-slots", set_max_slots)

    def job_of(exp_id: int) -> dict[str, Any]:
        jobs = json.loads(det("job", "list", "--json").stdout)
        jobs = jobs.get("jobs", jobs) if isinstance(jobs, dict) else jobs
        for j in jobs:
            if str(j.get("entityId")) == str(exp_id):
                return dict(j)
        raise Fail(f"no job of experiment {exp_id} in {[(j.get('entityId'), j.get('name')) for j in jobs]}")

    def job_list() -> None:
        c = need(S.get("C"), "running experiment C")
        out = det("job", "list").stdout
        expect("score-cli-c" in out, out[-400:])
        S["job_c"] = job_of(c)["jobId"]
    check("job list", job_list)

    def job_update() -> None:
        job = need(S.get("job_c"), "C's job")
        det("job", "update", job, "--priority", "30")
        expect(job_of(S["C"]).get("priority") == 30, f"priority {job_of(S['C']).get('priority')}")
    check("job update --priority", job_update)

    def job_update_batch() -> None:
        job = need(S.get("job_c"), "C's job")
        det("job", "update-batch", f"{job}.priority=20")
        expect(job_of(S["C"]).get("priority") == 20, f"priority {job_of(S['C']).get('priority')}")
    check("job update-batch", job_update_batch)

    def task_list() -> None:
        c_task = master.trials(need(S.get("C"), "running experiment C"))[0]["taskId"]
        out = det("task", "list").stdout
        expect(c_task in out, f"{c_task} not in: {out[-300:]}")
    check("task list", task_list)

    def trial_kill() -> None:
        tc = need(S.get("TC"), "C's running trial")
        out = det("trial", "kill", str(tc)).stdout
        expect(f"Killed trial {tc}" in out, out)
        wait_for(lambda: master.trials(S["C"])[0]["state"] in ("STATE_CANCELED", "STATE_ERROR"), 120,
                 "the trial to end")
        expect(master.trials(S["C"])[0]["state"] == "STATE_CANCELED", master.trials(S["C"])[0]["state"])
    check("trial kill", trial_kill)

    def kill() -> None:
        d = need(S.get("D"), "experiment D")
        det("experiment", "kill", str(d))
        master.wait_state(d, ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"), 120)
        expect(exp_state(d) == "STATE_CANCELED", exp_state(d))
    check("experiment kill", kill)

    def delete() -> None:
        d = need(S.get("D"), "experiment D")
        out = det("experiment", "delete", str(d), "--yes").stdout
        expect(f"Deletion of experiment {d} is in progress" in out, out)
        wait_for(lambda: master.status(f"/api/v1/experiments/{d}") == 404, 120, "the experiment to be gone")
    check("experiment delete --yes", delete)

    # Commands, shells, notebooks (on the default environment).
    def cmd_run() -> None:
        out = det("cmd", "run", "for x in alpha beta; do echo item-$x; done", timeout=300).stdout
        expect("item-alpha" in out and "item-beta" in out, out[-400:])
        m = re.search(r"Launched command \(id: ([0-9a-f-]+)", out)
        S["cmd1"] = m.group(1) if m else None
    check("cmd run (shell loop, follows to the end)", cmd_run)

    def cmd_run_detach() -> None:
        out = det("cmd", "run", "--detach", "sleep 600").stdout.strip()
        expect(re.fullmatch(r"[0-9a-f-]{36}", out.splitlines()[-1] if out else ""), f"printed {out[-200:]}")
        S["cmd2"] = out.splitlines()[-1]
    check("cmd run --detach", cmd_run_detach)

    def cmd_list() -> None:
        listed = {r[0]: r for r in rows(det("cmd", "list").stdout)}
        c2 = need(S.get("cmd2"), "the detached command")
        expect(c2 in listed, f"{c2} not in {list(listed)}")
    check("cmd list", cmd_list)

    def cmd_config() -> None:
        c2 = need(S.get("cmd2"), "the detached command")
        shown = yaml.safe_load(det("cmd", "config", c2).stdout)
        expect("sleep 600" in json.dumps(shown.get("entrypoint")), str(shown)[:300])
    check("cmd config", cmd_config)

    def cmd_logs() -> None:
        c1 = need(S.get("cmd1"), "the finished command")
        out = det("cmd", "logs", c1).stdout
        expect("item-alpha" in out and "item-beta" in out, out[-300:])
    check("cmd logs", cmd_logs)

    def task_logs() -> None:
        c1 = need(S.get("cmd1"), "the finished command")
        out = det("task", "logs", c1).stdout
        expect("item-beta" in out, out[-300:])
    check("task logs", task_logs)

    def cmd_kill() -> None:
        c2 = need(S.get("cmd2"), "the detached command")
        out = det("cmd", "kill", c2).stdout
        expect(f"Killed command {c2}" in out, out)
        wait_for(lambda: master.get(f"/api/v1/commands/{c2}")["command"]["state"] == "STATE_TERMINATED", 120,
                 "the command to end")
    check("cmd kill", cmd_kill)

    def shell_start() -> None:
        out = det("shell", "start", "--detach").stdout.strip()
        expect(re.fullmatch(r"[0-9a-f-]{36}", out.splitlines()[-1] if out else ""), f"printed {out[-200:]}")
        S["shell"] = out.splitlines()[-1]
    check("shell start --detach", shell_start)

    def shell_list() -> None:
        sh = need(S.get("shell"), "the shell")
        expect(sh in {r[0] for r in rows(det("shell", "list").stdout)}, "shell not listed")
    check("shell list", shell_list)

    def shell_show_ssh() -> None:
        sh = need(S.get("shell"), "the shell")
        out = det("shell", "show-ssh-command", sh, timeout=300).stdout
        expect("ssh " in out and "ProxyCommand" in out and sh in out, out[-300:])
    check("shell show-ssh-command", shell_show_ssh)

    def shell_open() -> None:
        sh = need(S.get("shell"), "the shell")
        out = det("shell", "open", sh, "--", "echo", "hello-from-the-shell", timeout=300).stdout
        expect("hello-from-the-shell" in out, out[-300:])
    check("shell open ID -- COMMAND", shell_open)

    def shell_kill() -> None:
        sh = need(S.get("shell"), "the shell")
        out = det("shell", "kill", sh).stdout
        expect(f"Killed shell {sh}" in out, out)
    check("shell kill", shell_kill)

    def notebook_start() -> None:
        out = det("notebook", "start", "--no-browser", timeout=400).stdout
        expect("Jupyter Notebook is running at" in out, out[-400:])
        m = re.search(r"Launched notebook \(id: ([0-9a-f-]+)", out)
        S["nb"] = m.group(1) if m else None
    check("notebook start --no-browser", notebook_start)

    def notebook_list() -> None:
        nb = need(S.get("nb"), "the notebook")
        listed = {r[0]: r for r in rows(det("notebook", "list").stdout)}
        expect(nb in listed and listed[nb][3] == "RUNNING", f"{listed.get(nb)}")
    check("notebook list", notebook_list)

    def notebook_logs() -> None:
        nb = need(S.get("nb"), "the notebook")
        out = det("notebook", "logs", nb, "--tail", "20").stdout
        expect("Jupyter" in out or "ServerApp" in out or "jupyter" in out, out[-300:])
    check("notebook logs --tail", notebook_logs)

    def notebook_kill() -> None:
        nb = need(S.get("nb"), "the notebook")
        out = det("notebook", "kill", nb).stdout
        expect(f"Killed notebook {nb}" in out, out)
        wait_for(lambda: master.get(f"/api/v1/notebooks/{nb}")["notebook"]["state"] == "STATE_TERMINATED", 120,
                 "the notebook to end")
    check("notebook kill", notebook_kill)

    def template_remove() -> None:
        det("template", "remove", "score-tpl")
        expect("score-tpl" not in det("template", "list").stdout, "still listed")
    check("template remove", template_remove)
