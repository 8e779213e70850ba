"""The ``sdk`` group: one script in the client's own interpreter, one JSON line per call
(``determined.experimental.client``), and the runner that scores its lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import yaml

from benchmarks.determined_client.scoreboard import Result, Scoreboard, one_line
from benchmarks.determined_client.settings import NEW_PASSWORD, PASSWORD
from benchmarks.determined_client.workloads import sleep_config, tutorial_config, tutorial_context

SDK_SCRIPT = r'''
import json, pathlib, signal, sys, time, traceback, warnings
warnings.simplefilter("ignore")
from determined.experimental import client
from determined.common.experimental import checkpoint as _ckpt

A = json.loads(sys.argv[1])
MASTER = A["master"]
S = {}


class StepTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise StepTimeout("the call did not return in time")


signal.signal(signal.SIGALRM, _alarm)


def step(name, timeout=180):
    def run(fn):
        start = time.time()
        signal.alarm(timeout)
        try:
            fn()
            ok, error = True, ""
        except KeyError as e:
            ok, error = False, f"needs {e.args[0]}, which an earlier call did not provide"
        except BaseException as e:
            ok, error = False, f"{type(e).__name__}: {e}"
            tb = traceback.format_exc(limit=4)
            error += "\n" + tb[-1500:]
        finally:
            signal.alarm(0)
        print("SDK-CHECK " + json.dumps({"name": name, "ok": ok, "error": error[:3000],
                                          "seconds": round(time.time() - start, 1)}), flush=True)
        return fn
    return run


def check(cond, message):
    if not cond:
        raise AssertionError(message)


# Users
@step("client.login")
def _():
    client.login(master=MASTER, user="admin", password="")

@step("client.whoami")
def _():
    me = client.whoami()
    check(me.username == "admin" and me.admin, f"{me.username} admin={me.admin}")

@step("client.list_users")
def _():
    names = {u.username for u in client.list_users()}
    check({"admin", "determined"} <= names, names)

@step("client.create_user")
def _():
    u = client.create_user("sdk-user", admin=False, password=A["password"])
    check(u.username == "sdk-user" and u.user_id, vars(u))
    S["user_id"] = u.user_id

@step("client.get_user_by_name / get_user_by_id")
def _():
    check(client.get_user_by_id(S["user_id"]).username == "sdk-user", "get_user_by_id: wrong user")
    u = client.get_user_by_name("sdk-user")
    check(u.user_id == S["user_id"] and u.active is True and u.admin is False, (u.user_id, u.active, u.admin))

@step("User.change_display_name")
def _():
    client.get_user_by_id(S["user_id"]).change_display_name("SDK User")
    check(client.get_user_by_id(S["user_id"]).display_name == "SDK User", "display name unchanged")

@step("User.deactivate / list_users(active=True)")
def _():
    client.get_user_by_id(S["user_id"]).deactivate()
    check("sdk-user" not in {u.username for u in client.list_users(active=True)}, "still listed as active")

@step("User.activate")
def _():
    client.get_user_by_id(S["user_id"]).activate()
    check(client.get_user_by_id(S["user_id"]).active is True, "still inactive")

@step("User.rename")
def _():
    client.get_user_by_id(S["user_id"]).rename("sdk-user2")
    check(client.get_user_by_id(S["user_id"]).username == "sdk-user2", "name unchanged")

@step("User.change_password / Determined(user=, password=)")
def _():
    client.get_user_by_id(S["user_id"]).change_password(A["new_password"])
    other = client.Determined(MASTER, user="sdk-user2", password=A["new_password"])
    check(other.whoami().username == "sdk-user2", "signed in as someone else")

# Workspaces and projects
@step("client.create_workspace")
def _():
    ws = client.create_workspace("sdk-ws")
    check(ws.name == "sdk-ws" and ws.id, vars(ws))
    client.create_workspace("sdk-tmp")

@step("client.list_workspaces")
def _():
    names = {w.name for w in client.list_workspaces()}
    check({"Uncategorized", "sdk-ws", "sdk-tmp"} <= names, names)

@step("client.delete_workspace")
def _():
    client.delete_workspace("sdk-tmp")
    time.sleep(1)
    check("sdk-tmp" not in {w.name for w in client.list_workspaces()}, "still listed")

@step("Workspace.create_project")
def _():
    p = client.get_workspace("sdk-ws").create_project("sdk-proj", description="made by the SDK")
    check(p.name == "sdk-proj" and p.id, vars(p))
    S["project_id"] = p.id

@step("Workspace.list_projects")
def _():
    check("sdk-proj" in {p.name for p in client.get_workspace("sdk-ws").list_projects()}, "not listed")

@step("Project.set_description")
def _():
    p = client.get_workspace("sdk-ws").get_project("sdk-proj")
    p.set_description("changed by the SDK")
    p.reload()
    check(p.description == "changed by the SDK", p.description)

@step("Workspace.list_pools")
def _():
    pools = client.get_workspace("sdk-ws").list_pools()
    check(isinstance(pools, list), pools)

# Experiments
@step("client.create_experiment (config dict, model_dir)")
def _():
    e = client.create_experiment(A["main_config"], A["main_dir"])
    check(e.id, "no id")
    S["E1"] = e.id

@step("client.create_experiment (config file, project_id)")
def _():
    e = client.create_experiment(A["sleep_config_path"], A["sleep_dir"], project_id=S["project_id"])
    S["E2"] = e.id
    e3 = client.create_experiment(A["sleep_config_path"], A["sleep_dir"])
    S["E3"] = e3.id

@step("client.get_experiment")
def _():
    e = client.get_experiment(S["E1"])
    check(e.id == S["E1"] and e.name == "sdk-main", (e.id, e.name))

@step("Experiment.await_first_trial")
def _():
    t = client.get_experiment(S["E1"]).await_first_trial(interval=0.5)
    S["T1"] = t.id

@step("Experiment.wait", timeout=600)
def _():
    state = client.get_experiment(S["E1"]).wait(interval=1)
    check(state == client.ExperimentState.COMPLETED, state)
    # checkpoint GC after the end leaves the policy's 3 latest
    deadline = time.time() + 120
    while time.time() < deadline:
        ck = client.get_trial(S["T1"]).list_checkpoints(sort_by=client.CheckpointSortBy.BATCH_NUMBER,
                                                         order_by=client.OrderBy.DESC)
        if len([c for c in ck if c.state == client.CheckpointState.COMPLETED]) <= 3:
            break
        time.sleep(1)

@step("Experiment.reload (state, config, progress)")
def _():
    e = client.get_experiment(S["E1"])
    e.reload()
    check(e.state == client.ExperimentState.COMPLETED, e.state)
    check(e.config["searcher"]["metric"] == "x" and e.progress in (1, 1.0), (e.config.get("searcher"), e.progress))

@step("client.list_experiments()")
def _():
    ids = {e.id for e in client.list_experiments()}
    check({S["E1"], S["E2"], S["E3"]} <= ids, ids)

@step("client.list_experiments(name=)")
def _():
    check([e.id for e in client.list_experiments(name="sdk-main")] == [S["E1"]], "name filter")

@step("client.list_experiments(states=)")
def _():
    ids = {e.id for e in client.list_experiments(states=[client.ExperimentState.COMPLETED])}
    check(S["E1"] in ids and S["E2"] not in ids, ids)

@step("client.list_experiments(experiment_ids=)")
def _():
    found = sorted(e.id for e in client.list_experiments(experiment_ids=[S["E1"], S["E2"]]))
    check(found == sorted([S["E1"], S["E2"]]), found)

@step("Experiment.add_label / list_experiments(labels=)")
def _():
    e = client.get_experiment(S["E1"])
    e.add_label("sdk-label")
    check([x.id for x in client.list_experiments(labels=["sdk-label"])] == [S["E1"]], "labels filter")

@step("Experiment.remove_label")
def _():
    e = client.get_experiment(S["E1"])
    e.remove_label("sdk-label")
    e.reload()
    check("sdk-label" not in (e.labels or []), e.labels)

@step("Experiment.set_name / set_description")
def _():
    e = client.get_experiment(S["E1"])
    e.set_name("sdk-main-renamed")
    e.set_description("described by the SDK")
    e.reload()
    check((e.name, e.description) == ("sdk-main-renamed", "described by the SDK"), (e.name, e.description))

@step("Experiment.list_trials")
def _():
    trials = client.get_experiment(S["E1"]).list_trials()
    check([t.id for t in trials] == [S["T1"]], [t.id for t in trials])

@step("Experiment.list_checkpoints(sort_by=, order_by=)")
def _():
    ck = client.get_experiment(S["E1"]).list_checkpoints(sort_by=client.CheckpointSortBy.BATCH_NUMBER,
                                                          order_by=client.OrderBy.DESC)
    steps = [c.metadata.get("steps_completed") for c in ck]
    check(steps and steps[0] == 100 and steps == sorted(steps, reverse=True), steps)
    S["ckpts"] = [c.uuid for c in ck if c.state == client.CheckpointState.COMPLETED]  # newest first
    check(len(S["ckpts"]) == 3, f"{len(S['ckpts'])} completed checkpoints left by GC (policy: 3 latest)")

@step("Experiment.top_checkpoint")
def _():
    c = client.get_experiment(S["E1"]).top_checkpoint()
    check(c.uuid == S["ckpts"][0], (c.uuid, S["ckpts"]))

@step("Experiment.download_code")
def _():
    import tarfile
    path = client.get_experiment(S["E1"]).download_code(A["out_dir"] + "/code")
    with tarfile.open(path) as tar:
        names = tar.getnames()
    check(any(n.endswith("2_checkpoints.py") for n in names), names)

@step("Project.list_experiments")
def _():
    p = client.get_workspace("sdk-ws").get_project("sdk-proj")
    check([e.id for e in p.list_experiments()] == [S["E2"]], [e.id for e in p.list_experiments()])

@step("Experiment.pause")
def _():
    e = client.get_experiment(S["E2"])
    e.pause()
    e.reload()
    check(e.state == client.ExperimentState.PAUSED, e.state)

@step("Experiment.activate")
def _():
    e = client.get_experiment(S["E2"])
    e.activate()
    e.reload()
    live = (client.ExperimentState.ACTIVE, client.ExperimentState.RUNNING, client.ExperimentState.QUEUED)
    check(e.state in live, e.state)

@step("Experiment.move_to_project")
def _():
    e = client.get_experiment(S["E2"])
    e.move_to_project("Uncategorized", "Uncategorized")
    e.reload()
    check(e.project_id == 1, e.project_id)

@step("Trial.kill", timeout=300)
def _():
    e = client.get_experiment(S["E2"])
    t = e.await_first_trial(interval=0.5)
    deadline = time.time() + 240
    while client.get_trial(t.id).state != client.TrialState.RUNNING and time.time() < deadline:
        time.sleep(0.5)
    client.get_trial(t.id).kill()
    state = e.wait(interval=1)
    check(state == client.ExperimentState.CANCELED and client.get_trial(t.id).state == client.TrialState.CANCELED,
          (state, client.get_trial(t.id).state))

@step("Experiment.kill", timeout=300)
def _():
    e = client.get_experiment(S["E3"])
    e.kill()
    check(e.wait(interval=1) == client.ExperimentState.CANCELED, client.get_experiment(S["E3"]).state)

@step("Experiment.archive / unarchive")
def _():
    e = client.get_experiment(S["E2"])
    e.archive()
    e.reload()
    archived = e.archived
    e.unarchive()
    e.reload()
    check(archived is True and e.archived is False, (archived, e.archived))

@step("Experiment.delete")
def _():
    client.get_experiment(S["E3"]).delete()
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            client.get_experiment(S["E3"])
        except Exception as e:
            check(type(e).__name__ == "NotFoundException", type(e).__name__)
            return
        time.sleep(1)
    raise AssertionError("still there after 120 s")

# Trials and metrics
@step("client.get_trial")
def _():
    t = client.get_trial(S["T1"])
    check(t.experiment_id == S["E1"] and t.state == client.TrialState.COMPLETED, (t.experiment_id, t.state))

@step("Trial.iter_metrics('training')")
def _():
    got = [(m.steps_completed, m.metrics.get("x")) for m in client.get_trial(S["T1"]).iter_metrics("training")]
    check(got == [(s, s) for s in range(10, 101, 10)], got)

@step("Trial.iter_metrics('validation')")
def _():
    got = [(m.steps_completed, m.metrics.get("x")) for m in client.get_trial(S["T1"]).iter_metrics("validation")]
    check(got == [(100, 100)], got)

@step("Trial.stream_training_metrics")
def _():
    got = [m.steps_completed for m in client.get_trial(S["T1"]).stream_training_metrics()]
    check(got == list(range(10, 101, 10)), got)

@step("Trial.summary_metrics")
def _():
    t = client.get_trial(S["T1"])
    t.reload()
    summary = t.summary_metrics
    check(summary["avg_metrics"]["x"]["count"] == 10 and summary["validation_metrics"]["x"]["last"] == 100, summary)

@step("Trial.logs")
def _():
    lines = list(client.get_trial(S["T1"]).logs())
    check(sum("x is now " in line for line in lines) >= 100, len(lines))

@step("Trial.list_checkpoints")
def _():
    ck = client.get_trial(S["T1"]).list_checkpoints(sort_by=client.CheckpointSortBy.BATCH_NUMBER,
                                                    order_by=client.OrderBy.ASC)
    completed = [c.uuid for c in ck if c.state == client.CheckpointState.COMPLETED]
    check(completed == list(reversed(S["ckpts"])), completed)

@step("client.iter_trials_metrics")
def _():
    got = [(m.trial_id, m.steps_completed) for m in client.iter_trials_metrics([S["T1"]], "validation")]
    check(got == [(S["T1"], 100)], got)

# Checkpoints
@step("client.get_checkpoint")
def _():
    c = client.get_checkpoint(S["ckpts"][0])
    check(c.state == client.CheckpointState.COMPLETED and c.metadata.get("steps_completed") == 100,
          (c.state, c.metadata))

@step("Checkpoint.download (via the master)")
def _():
    path = client.get_checkpoint(S["ckpts"][0]).download(A["out_dir"] + "/ckpt", mode=_ckpt.DownloadMode.MASTER)
    state = (pathlib.Path(path) / "state").read_text()
    check(state.startswith("100,100,"), state)

@step("Checkpoint.add_metadata")
def _():
    client.get_checkpoint(S["ckpts"][0]).add_metadata({"reviewed": "yes", "nested": {"a": 1}})
    md = client.get_checkpoint(S["ckpts"][0]).metadata
    check(md.get("reviewed") == "yes" and md.get("nested") == {"a": 1} and md.get("steps_completed") == 100, md)

@step("Checkpoint.remove_metadata")
def _():
    client.get_checkpoint(S["ckpts"][0]).remove_metadata(["reviewed"])
    md = client.get_checkpoint(S["ckpts"][0]).metadata
    check("reviewed" not in md and md.get("steps_completed") == 100, md)

@step("Checkpoint.delete")
def _():
    oldest = S["ckpts"][-1]
    client.get_checkpoint(oldest).delete()
    deadline = time.time() + 60
    while client.get_checkpoint(oldest).state != client.CheckpointState.DELETED and time.time() < deadline:
        time.sleep(1)
    check(client.get_checkpoint(oldest).state == client.CheckpointState.DELETED, client.get_checkpoint(oldest).state)

# Models
@step("client.create_model")
def _():
    m = client.create_model("sdk-model", description="made by the SDK", metadata={"team": "score"})
    check(m.name == "sdk-model" and m.metadata == {"team": "score"}, (m.name, m.metadata))

@step("client.get_model")
def _():
    m = client.get_model("sdk-model")
    check(m.description == "made by the SDK", m.description)
    S["model_id"] = m.model_id

@step("Model.register_version")
def _():
    v = client.get_model("sdk-model").register_version(S["ckpts"][0])
    check(v.model_version == 1 and v.checkpoint.uuid == S["ckpts"][0], (v.model_version, v.checkpoint.uuid))

@step("Model.get_version / list_versions")
def _():
    m = client.get_model("sdk-model")
    v = m.get_version()
    check(v is not None and v.model_version == 1, v)
    check([x.model_version for x in m.list_versions()] == [1], "versions")

@step("client.list_models")
def _():
    check("sdk-model" in {m.name for m in client.list_models()}, "not listed")

@step("Model.set_labels / get_model_labels")
def _():
    m = client.get_model("sdk-model")
    m.set_labels(["scored", "sdk"])
    m.add_metadata({"stage": "test"})
    m.reload()
    check(sorted(m.labels) == ["scored", "sdk"] and m.metadata.get("stage") == "test", (m.labels, m.metadata))
    check({"scored", "sdk"} <= set(client.get_model_labels()), client.get_model_labels())

@step("Model.archive / unarchive")
def _():
    m = client.get_model("sdk-model")
    m.archive()
    m.reload()
    archived = m.archived
    m.unarchive()
    m.reload()
    check(archived is True and m.archived is False, (archived, m.archived))

@step("client.logout")
def _():
    client.logout()
'''


def run_sdk(board: Scoreboard, venv: Path, url: str, work: Path) -> None:
    g = "sdk"
    home = work / "sdk-home"
    home.mkdir(parents=True, exist_ok=True)
    out_dir = work / "sdk-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    main_config = yaml.safe_load(tutorial_config(work, "2_checkpoints", "sdk-main", name="sdk-main",
                                                 checkpoint_storage={"save_experiment_best": 0, "save_trial_best": 1,
                                                                     "save_trial_latest": 3}).read_text())
    sleep_path, sleep_dir = sleep_config(work, "sdk-sleep")
    args = {"master": url, "password": PASSWORD, "new_password": NEW_PASSWORD, "main_config": main_config,
            "main_dir": str(tutorial_context(work, "2_checkpoints")), "sleep_config_path": str(sleep_path),
            "sleep_dir": str(sleep_dir), "out_dir": str(out_dir)}
    script = work / "sdk_score.py"
    script.write_text(SDK_SCRIPT)
    expected = re.findall(r'^@step\("([^"]+)"', SDK_SCRIPT, re.M)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), DET_MASTER=url, PYTHONUNBUFFERED="1")
    seen: set[str] = set()
    proc = subprocess.Popen([str(venv / "bin" / "python"), str(script), json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + 1800
    for line in proc.stdout:
        if line.startswith("SDK-CHECK "):
            found = json.loads(line[len("SDK-CHECK "):])
            seen.add(found["name"])
            first, _, rest = found["error"].partition("\n")
            board.add(Result(g, found["name"], bool(found["ok"]), one_line(first), rest.strip(), found["seconds"]))
        if time.monotonic() > deadline:
            proc.kill()
            break
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    stderr = proc.stderr.read()
    for name in expected:
        if name not in seen:
            board.add(Result(g, name, False, f"not reached: the SDK script ended (exit {proc.returncode})",
                             stderr[-1500:]))
