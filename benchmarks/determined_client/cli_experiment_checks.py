"""The ``cli`` group, second part: experiments A (tutorial 2, run to its end), B (created paused) and
T (from the template), then what the client does with a finished experiment: its trial, checkpoints,
models, labels and settings, archive, TensorBoards, and the move to a project."""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.determined_client.cluster import Master, RealDet
from benchmarks.determined_client.scoreboard import Scoreboard, created_id, expect, need, rows, wait_for
from benchmarks.determined_client.workloads import tutorial_config, tutorial_context


def run_experiment_checks(board: Scoreboard, det: RealDet, master: Master, work: Path, S: dict[str, Any]) -> None:
    g = "cli"
    out_dir = work / "cli-out"
    out_dir.mkdir(parents=True, exist_ok=True)

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    def exp_state(exp_id: int) -> str:
        return str(master.experiment(exp_id)["state"])

    # Experiments: A (tutorial 2, keeps its 3 latest checkpoints), B (created paused), T (from the template).
    ckpt_policy = {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 3}

    def create_a() -> None:
        cfg = tutorial_config(work, "2_checkpoints", "cli-a", name="score-cli-a", checkpoint_storage=ckpt_policy)
        S["A"] = created_id(det("experiment", "create", str(cfg), str(tutorial_context(work, "2_checkpoints"))).stdout)
        expect(exp_state(S["A"]) in ("STATE_ACTIVE", "STATE_RUNNING", "STATE_QUEUED"), exp_state(S["A"]))
    check("experiment create", create_a)

    def create_paused() -> None:
        cfg = tutorial_config(work, "2_checkpoints", "cli-b", name="score-cli-b")
        S["B"] = created_id(det("experiment", "create", "--paused", str(cfg),
                                str(tutorial_context(work, "2_checkpoints"))).stdout)
        expect(exp_state(S["B"]) == "STATE_PAUSED", exp_state(S["B"]))
    check("experiment create --paused", create_paused)

    def create_template() -> None:
        cfg = tutorial_config(work, "0_start", "cli-t", name="score-cli-template")
        S["T"] = created_id(det("experiment", "create", "--template", "score-tpl", str(cfg),
                                str(tutorial_context(work, "0_start"))).stdout)
        shown = yaml.safe_load(det("experiment", "config", str(S["T"])).stdout)
        # The config wins where it speaks (max_restarts 0); the template fills in the rest.
        expect(shown["resources"].get("priority") == 7 and shown.get("max_restarts") == 0,
               f"priority {shown['resources'].get('priority')}, max_restarts {shown.get('max_restarts')}")
    check("experiment create --template", create_template)

    def exp_list() -> None:
        listed = {r[0] for r in rows(det("experiment", "list").stdout)}
        for key in ("A", "B", "T"):
            expect(str(need(S.get(key), f"experiment {key}")) in listed, f"experiment {S[key]} not in {listed}")
    check("experiment list", exp_list)

    def activate() -> None:
        b = need(S.get("B"), "the paused experiment")
        det("experiment", "activate", str(b))
        expect(exp_state(b) in ("STATE_ACTIVE", "STATE_RUNNING", "STATE_QUEUED"), exp_state(b))
    check("experiment activate", activate)

    def pause() -> None:
        b = need(S.get("B"), "the paused experiment")
        det("experiment", "pause", str(b))
        expect(exp_state(b) == "STATE_PAUSED", exp_state(b))
    check("experiment pause", pause)

    def cancel() -> None:
        b = need(S.get("B"), "the paused experiment")
        det("experiment", "cancel", str(b))
        master.wait_state(b, ("STATE_CANCELED",), 180)
    check("experiment cancel", cancel)

    def continue_() -> None:
        b = need(S.get("B"), "the canceled experiment")
        out = det("experiment", "continue", str(b)).stdout
        expect(f"Continued experiment {b}" in out, out)
        # the canceled trial runs again and the experiment completes
        master.wait_state(b, ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"), 420)
        expect(exp_state(b) == "STATE_COMPLETED", exp_state(b))
    check("experiment continue", continue_)

    def wait() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "wait", str(a), "--polling-interval", "1", timeout=600)
        expect(exp_state(a) == "STATE_COMPLETED", exp_state(a))
        S["TA"] = master.trials(a)[0]["id"]
        # checkpoint GC runs after the end: wait until only the policy's 3 latest are left
        wait_for(lambda: len([c for c in master.checkpoints(S["TA"]) if c["state"] == "STATE_COMPLETED"]) <= 3,
                 120, "checkpoint GC")
    check("experiment wait", wait)

    def describe() -> None:
        a = need(S.get("A"), "experiment A")
        out = det("experiment", "describe", str(a)).stdout
        expect("COMPLETED" in out and "score-cli-a" in out and "Trial ID" in out, out[-400:])
    check("experiment describe", describe)

    def config() -> None:
        a = need(S.get("A"), "experiment A")
        shown = yaml.safe_load(det("experiment", "config", str(a)).stdout)
        expect(shown.get("name") == "score-cli-a" and shown["searcher"]["metric"] == "x", str(shown)[:300])
    check("experiment config", config)

    def list_trials() -> None:
        a = need(S.get("A"), "experiment A")
        trial_rows = rows(det("experiment", "list-trials", str(a)).stdout)
        expect(trial_rows and trial_rows[0][0] == str(S.get("TA")) and trial_rows[0][1] == "COMPLETED",
               f"rows {trial_rows[:2]}")
    check("experiment list-trials", list_trials)

    def list_checkpoints() -> None:
        a = need(S.get("A"), "experiment A")
        found = rows(det("experiment", "list-checkpoints", str(a)).stdout)
        uuids = [r[4] for r in found if re.fullmatch(r"[0-9a-f-]{36}", r[4])]
        expect(len(uuids) >= 2, f"checkpoints listed {uuids}")
        by_steps = sorted((c["metadata"].get("steps_completed", 0), c["uuid"]) for c in
                          master.checkpoints(need(S.get("TA"), "trial of A")) if c["state"] == "STATE_COMPLETED")
        S["ckpts"] = [u for _, u in by_steps]  # oldest first; the newest (100) has the validation
    check("experiment list-checkpoints", list_checkpoints)


    def trial_describe() -> None:
        ta = need(S.get("TA"), "trial of A")
        out = det("trial", "describe", str(ta)).stdout
        expect("COMPLETED" in out and need(S.get("ckpts"), "A's checkpoints")[-1] in out, out[-400:])
    check("trial describe", trial_describe)

    def trial_metrics_summary() -> None:
        ta = need(S.get("TA"), "trial of A")
        out = det("trial", "describe", str(ta), "--metrics-summary", "--json").stdout
        expect('"x"' in out, out[-400:])
    check("trial describe --metrics-summary --json", trial_metrics_summary)

    def trial_logs() -> None:
        ta = need(S.get("TA"), "trial of A")
        out = det("trial", "logs", str(ta)).stdout
        expect(out.count("x is now ") >= 100 and "x is now 100" in out, f"{out.count('x is now ')} lines of x")
    check("trial logs", trial_logs)

    def state_file(directory: Path) -> str:
        found = list(directory.rglob("state"))
        expect(found, f"no 'state' file under {directory}: {[p.name for p in directory.rglob('*')][:10]}")
        return found[0].read_text()

    def trial_download_latest() -> None:
        ta = need(S.get("TA"), "trial of A")
        target = out_dir / "trial-latest"
        det("trial", "download", str(ta), "--latest", "-o", str(target))
        expect(state_file(target).startswith(("80,", "90,", "100,")), state_file(target))
    check("trial download --latest", trial_download_latest)

    def checkpoint_describe() -> None:
        newest = need(S.get("ckpts"), "A's checkpoints")[-1]
        found = [r for r in rows(det("checkpoint", "describe", newest).stdout) if len(r) > 4 and r[4] == newest]
        expect(found and found[0][2] == "100" and found[0][1] == str(S.get("TA")), f"rows {found}")
    check("checkpoint describe", checkpoint_describe)

    def checkpoint_download() -> None:
        newest = need(S.get("ckpts"), "A's checkpoints")[-1]
        target = out_dir / "ckpt-master"
        det("checkpoint", "download", newest, "-o", str(target), "--mode", "master")
        expect(state_file(target).startswith(f"100,100,{S['TA']}"), state_file(target))
    check("checkpoint download --mode master", checkpoint_download)

    def model_create() -> None:
        out = det("model", "create", "score-model", "--description", "scored model").stdout
        expect("score-model" in out and "scored model" in out, out[-300:])
    check("model create", model_create)

    def model_list() -> None:
        expect("score-model" in [r[1] for r in rows(det("model", "list").stdout)], "score-model not listed")
    check("model list", model_list)

    def register_version() -> None:
        newest = need(S.get("ckpts"), "A's checkpoints")[-1]
        out = det("model", "register-version", "score-model", newest, "--json").stdout
        version = json.loads(out)
        expect(version.get("version") == 1 or version.get("model_version") == 1 or '"version": 1' in out, out[:300])
    check("model register-version", register_version)

    def list_versions() -> None:
        out = det("model", "list-versions", "score-model").stdout
        expect(need(S.get("ckpts"), "A's checkpoints")[-1] in out, out[-400:])
    check("model list-versions", list_versions)

    def model_describe() -> None:
        shown = json.loads(det("model", "describe", "score-model", "--json").stdout)
        expect(shown.get("name") == "score-model", str(shown)[:300])
    check("model describe --json", model_describe)

    def checkpoint_delete() -> None:
        oldest = need(S.get("ckpts"), "A's checkpoints")[0]
        out = det("checkpoint", "delete", oldest, "--yes").stdout
        expect("progress" in out or "Deleted" in out or oldest in out, out)
        wait_for(lambda: master.checkpoint(oldest)["state"] == "STATE_DELETED", 60, "the checkpoint to be deleted")
    check("checkpoint delete --yes", checkpoint_delete)

    def checkpoint_rm_glob() -> None:
        middle = need(S.get("ckpts"), "A's checkpoints")[1]
        det("checkpoint", "rm", middle, "--glob", "state", "--yes")
        wait_for(lambda: "state" not in (master.checkpoint(middle).get("resources") or {}), 60,
                 "the globbed file to be gone from the checkpoint's resources")
    check("checkpoint rm --glob", checkpoint_rm_glob)

    def exp_download() -> None:
        a = need(S.get("A"), "experiment A")
        target = out_dir / "exp-download"
        det("experiment", "download", str(a), "--top-n", "1", "-o", str(target))
        expect(state_file(target).startswith("100,100,"), state_file(target))
    check("experiment download --top-n 1", exp_download)

    def download_model_def() -> None:
        a = need(S.get("A"), "experiment A")
        target = out_dir / "model-def"
        target.mkdir(exist_ok=True)
        det("experiment", "download-model-def", str(a), "--output-dir", str(target))
        tgz = list(target.glob("*.tgz"))
        expect(tgz, f"nothing written: {list(target.iterdir())}")
        with tarfile.open(tgz[0]) as tar:
            names = tar.getnames()
        expect(any(n.endswith("2_checkpoints.py") for n in names), f"archive holds {names}")
    check("experiment download-model-def", download_model_def)

    def label_add() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "label", "add", str(a), "scored")
        expect("scored" in (master.experiment(a).get("labels") or []), str(master.experiment(a).get("labels")))
        det("experiment", "label", "remove", str(a), "scored")
        expect("scored" not in (master.experiment(a).get("labels") or []), str(master.experiment(a).get("labels")))
    check("experiment label add / remove", label_add)

    def set_description() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "set", "description", str(a), "described by the score")
        expect(master.experiment(a).get("description") == "described by the score",
               str(master.experiment(a).get("description")))
    check("experiment set description", set_description)

    def set_name() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "set", "name", str(a), "score-cli-a2")
        expect(master.experiment(a).get("name") == "score-cli-a2", str(master.experiment(a).get("name")))
    check("experiment set name", set_name)

    def set_gc_policy() -> None:
        a = need(S.get("A"), "experiment A")
        out = det("experiment", "set", "gc-policy", str(a), "--save-experiment-best", "5", "--save-trial-best", "5",
                  "--save-trial-latest", "5", "--yes").stdout
        shown = yaml.safe_load(det("experiment", "config", str(a)).stdout)["checkpoint_storage"]
        expect(shown.get("save_trial_latest") == 5 and shown.get("save_experiment_best") == 5, f"{out} -> {shown}")
    check("experiment set gc-policy", set_gc_policy)

    def archive() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "archive", str(a))
        listed = {r[0] for r in rows(det("experiment", "list").stdout)}
        expect(str(a) not in listed and master.experiment(a).get("archived") is True, "still listed / not archived")
        expect(str(a) in {r[0] for r in rows(det("experiment", "list", "--all").stdout)}, "archived one not in --all")
    check("experiment archive / list --all", archive)

    def unarchive() -> None:
        a = need(S.get("A"), "experiment A")
        det("experiment", "unarchive", str(a))
        expect(master.experiment(a).get("archived") is False, "still archived")
    check("experiment unarchive", unarchive)

    def tensorboard_start() -> None:
        a = need(S.get("A"), "experiment A")
        out = det("tensorboard", "start", str(a), "--no-browser", timeout=300).stdout
        expect("is running at" in out, out[-400:])
        m = re.search(r"Launched tensorboard \(id: ([0-9a-f-]+)", out)
        S["tb1"] = m.group(1) if m else None
    check("tensorboard start EXP --no-browser", tensorboard_start)

    def tensorboard_trial() -> None:
        ta = need(S.get("TA"), "trial of A")
        out = det("tensorboard", "start", "-t", str(ta), "--detach").stdout.strip()
        expect(re.fullmatch(r"[0-9a-f-]{36}", out.splitlines()[-1] if out else ""), f"printed: {out[-200:]}")
        S["tb2"] = out.splitlines()[-1]
    check("tensorboard start -t TRIAL --detach", tensorboard_trial)

    def tensorboard_list() -> None:
        listed = {r[0] for r in rows(det("tensorboard", "list").stdout)}
        for key in ("tb1", "tb2"):
            expect(need(S.get(key), "a started TensorBoard") in listed, f"{S[key]} not in {listed}")
    check("tensorboard list", tensorboard_list)

    def tensorboard_kill() -> None:
        for key in ("tb1", "tb2"):
            tb = need(S.get(key), "a started TensorBoard")
            out = det("tensorboard", "kill", tb).stdout
            expect(f"Killed tensorboard {tb}" in out, out)
        wait_for(lambda: all(master.get(f"/api/v1/tensorboards/{S[k]}")["tensorboard"]["state"] == "STATE_TERMINATED"
                             for k in ("tb1", "tb2")), 120, "the TensorBoards to end")
    check("tensorboard kill", tensorboard_kill)

    def move() -> None:
        a = need(S.get("A"), "experiment A")
        out = det("experiment", "move", str(a), "score-ws", "score-proj").stdout
        moved = master.experiment(a)
        expect("Moved experiment" in out and moved.get("projectName") == "score-proj",
               f"{out} {moved.get('projectName')}")
    check("experiment move", move)
