"""`det cmd`, `det shell` and `det notebook` on a real cluster (`det deploy local up`): a command runs
its context's script, its output comes back through `det cmd run`, and `det cmd run` exits with the
script's own exit code; a shell's task runs an SSH server that `det shell open` reaches with the
key only its owner gets, checking the host key the master pinned; a notebook's JupyterLab answers
at the URL `det notebook start` prints, through the master's proxy, for its signed-in owner. Jobs
`pip install` into a layer of their own: a command (an OpenPAI task) and a trial's startup hook and
environment.pip_requirements, and a failed install ends the trial in ERROR after one run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time

import httpx
import pytest
import yaml

from tests.e2e.conftest import shared_local_cluster
from tests.support.cluster import login
from tests.support.deadline import bounded
from tests.support.loopback_names import LoopbackNames
from tests.support.tiny_wheel import wheel

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
# The module shares a cluster (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_commands")]

# Each test launches, follows and kills its own command, shell, notebook or TensorBoard on the one
# 1-slot cluster the module shares.
local_cluster = shared_local_cluster

SCRIPT = """import sys
print(f"hello from {sys.argv[1]}", flush=True)
print("a line on stderr", file=sys.stderr, flush=True)
print(open("data.txt").read().strip(), flush=True)  # the context is the working directory
sys.exit(int(sys.argv[2]))
"""


def described(cluster, kind: str, task: str) -> dict:
    return json.loads(cluster.det(kind, "describe", task, "--json").stdout)


def wait_state(cluster, kind: str, task: str, state: str, timeout: float = 180) -> dict:
    deadline = time.time() + bounded(timeout)
    while (found := described(cluster, kind, task))["state"] != state:
        assert found["state"] != "STATE_TERMINATED" and time.time() < deadline, (
            found, cluster.det(kind, "logs", task, check=False).stdout[-3000:])
        time.sleep(1)
    return found


def test_cmd_run_prints_the_scripts_output_and_exits_with_its_code(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "script.py").write_text(SCRIPT)
    (ctx / "data.txt").write_text("data from the context\n")

    r = cluster.det("cmd", "run", "-c", str(ctx), "python3", "script.py", "ok", "0")
    # the task's lines as they are: its stdout and stderr, nothing of the task's wrapper
    lines = r.stdout.splitlines()
    assert [line for line in lines if line != "a line on stderr"] == ["hello from ok", "data from the context"], \
        r.stdout + r.stderr
    assert "a line on stderr" in lines
    assert r.stderr.endswith(" ended: exit code 0\n"), r.stderr
    assert r.stderr.startswith("Launched command (id: ")

    r = cluster.det("cmd", "run", "--description", "fails", "-c", str(ctx), "python3", "script.py", "bad", "3",
                    check=False)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "hello from bad" in r.stdout and "ended: exit code 3" in r.stderr

    listed = json.loads(cluster.det("cmd", "list", "--json").stdout)
    assert sorted((c["description"] == "fails", c["state"], c["exitCode"]) for c in listed) == [
        (False, "STATE_TERMINATED", 0), (True, "STATE_TERMINATED", 3)]
    failed = next(c["id"] for c in listed if c["description"] == "fails")
    assert "hello from bad" in cluster.det("cmd", "logs", failed).stdout

    # detached: the id only; `logs -f` follows it to its end
    cmd_id = cluster.det("cmd", "run", "-d", "-c", str(ctx), "python3", "script.py", "detached", "0").stdout.strip()
    r = cluster.det("cmd", "logs", "-f", cmd_id)
    assert "hello from detached" in r.stdout and "ended: exit code 0" in r.stderr


def test_shell_open_runs_a_command_on_the_shells_ssh_server(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    shell_id = cluster.det("shell", "start", "--detach").stdout.strip()
    shell = wait_state(cluster, "shell", shell_id, "STATE_RUNNING")
    assert shell["addresses"] and shell["hostPublicKey"].startswith("ssh-ed25519 ")

    r = cluster.det("shell", "open", shell_id, "--", "echo", "hi", timeout=120)
    assert r.stdout == "hi\n", r.stderr
    key_dir = tmp_path / "cluster" / "xdg" / "controlplane" / "shell-ssh" / shell_id
    assert oct((key_dir / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    assert oct(key_dir.stat().st_mode & 0o777) == "0o700"
    address = shell["addresses"][0]
    assert (key_dir / "known_hosts").read_text() == \
        f"[{address['hostIp']}]:{address['hostPort']} {shell['hostPublicKey']}\n"

    # the command the client runs, and with a host key other than the pinned one, ssh refuses
    argv = shlex.split(cluster.det("shell", "show_ssh_command", shell_id, "--", "echo", "in").stdout)
    assert "StrictHostKeyChecking=yes" in argv and argv[-3:] == [f"det@{address['hostIp']}", "echo", "in"]
    (key_dir / "known_hosts").write_text(f"[{address['hostIp']}]:{address['hostPort']} ssh-ed25519 "
                                         "AAAAC3NzaC1lZDI1NTE5AAAAIBQWtBvDcxp3jHmmLHR8SaN2MGxVQ1f6H3NgTaiHX2Mq\n")
    r = subprocess.run([argv[0], "-o", "BatchMode=yes", *argv[1:]], capture_output=True, text=True, timeout=60)
    assert r.returncode == 255 and "in" not in r.stdout.split(), r.stdout + r.stderr
    assert "host key" in r.stderr.lower(), r.stderr

    r = cluster.det("shell", "kill", shell_id)
    assert r.stdout == f"Killed shell {shell_id}\n"
    wait_state(cluster, "shell", shell_id, "STATE_TERMINATED")
    r = cluster.det("shell", "open", shell_id, "--", "echo", "hi", check=False)
    assert (r.returncode, r.stderr) == (1, f"Error: shell {shell_id} is not running (TERMINATED)\n")


@pytest.mark.usefixtures("own_cluster")  # `det shell list` must list its shell alone, not the other tests' too
def test_shell_start_waits_until_it_runs_then_opens_it(local_cluster):
    cluster = local_cluster(agents=1, slots=1)
    r = cluster.det("shell", "start", "--description", "one-shot", "--", "echo", "from-start", timeout=240)
    assert r.stdout == "from-start\n", r.stderr
    assert ": RUNNING" in r.stderr
    [shell] = json.loads(cluster.det("shell", "list", "--json").stdout)
    assert (shell["description"], shell["state"]) == ("one-shot", "STATE_RUNNING")
    cluster.det("shell", "kill", shell["id"])


def test_notebook_start_prints_its_url_and_jupyterlab_answers_through_the_master(local_cluster):
    cluster = local_cluster(agents=1, slots=1)
    r = cluster.det("notebook", "start", "--no-browser", timeout=300)
    found = re.fullmatch(rf"{re.escape(cluster.url)}/proxy/([0-9a-f-]{{36}})/lab\n", r.stdout)
    assert found, r.stdout + r.stderr
    nb_id = found.group(1)
    assert f"Notebook {nb_id}: RUNNING" in r.stderr
    assert cluster.det("notebook", "open", nb_id).stdout == r.stdout

    # The URL is the master's link to the notebook's own origin, which a one-time ticket signs in to.
    with httpx.Client(base_url=cluster.url, timeout=60, follow_redirects=True, transport=LoopbackNames()) as http:
        auth = {"Authorization": f"Bearer {login(cluster.url)}"}
        status = http.get(f"/proxy/{nb_id}/api/status", headers=auth)
        assert status.status_code == 200, status.text
        proxy = httpx.URL(str(status.url))
        assert proxy.port != httpx.URL(cluster.url).port and proxy.path == f"/proxy/{nb_id}/api/status", proxy
        assert proxy.host == f"{nb_id}.localhost", proxy  # a host of its own (the master is on loopback)
        assert status.headers["content-type"].startswith("application/json") and "started" in status.json()
        lab = http.get(f"/proxy/{nb_id}/lab", headers=auth)
        assert lab.status_code == 200 and "JupyterLab" in lab.text, lab.text[:500]
    assert httpx.get(f"{cluster.url}/proxy/{nb_id}/api/status").status_code == 401  # no sign-in, no notebook
    with httpx.Client(transport=LoopbackNames()) as anonymous:
        assert anonymous.get(str(proxy)).status_code == 401  # nor on the notebook's origin

    assert cluster.det("notebook", "kill", nb_id).stdout == f"Killed notebook {nb_id}\n"
    wait_state(cluster, "notebook", nb_id, "STATE_TERMINATED")


TRAIN = """\
from controlplane import core
with core.init() as ctx:
    for step in (1, 2, 3):
        ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
    ctx.train.report_validation_metrics(3, {"validation_loss": 0.25})
"""


def test_tensorboard_start_serves_an_experiments_scalars_through_the_master(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    ctx = tmp_path / "exp"
    ctx.mkdir()
    (ctx / "train.py").write_text(TRAIN)
    (tmp_path / "exp.yaml").write_text("name: tb\nentrypoint: python3 train.py\nsearcher:\n  name: single\n"
                                       "  metric: validation_loss\n  max_length: 3\n")
    created = cluster.det("experiment", "create", str(tmp_path / "exp.yaml"), str(ctx), "--json")
    exp_id = json.loads(created.stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=300)
    r = cluster.det("tensorboard", "start", str(exp_id), timeout=300)
    found = re.fullmatch(rf"{re.escape(cluster.url)}/proxy/([0-9a-f-]{{36}})/\n", r.stdout)
    assert found, r.stdout + r.stderr
    board = found.group(1)
    with httpx.Client(base_url=cluster.url, timeout=60, follow_redirects=True, transport=LoopbackNames()) as http:
        auth = {"Authorization": f"Bearer {login(cluster.url)}"}
        deadline = time.time() + 120
        while True:  # TensorBoard loads the event files on its own schedule
            tags = http.get(f"/proxy/{board}/data/plugin/scalars/tags", headers=auth)
            assert tags.status_code == 200, tags.text
            runs = tags.json()
            if any("training/loss" in t for t in runs.values()):
                break
            assert time.time() < deadline, runs
            time.sleep(2)
        run = next(name for name, t in runs.items() if "training/loss" in t)
        assert run.startswith(f"experiment_{exp_id}/trial_") and "validation/validation_loss" in runs[run]
        points = http.get(f"/proxy/{board}/data/plugin/scalars/scalars", headers=auth,
                          params={"run": run, "tag": "training/loss"}).json()
        assert [(p[1], round(p[2], 4)) for p in points] == [(1, 1.0), (2, 0.5), (3, 0.3333)]
    assert httpx.get(f"{cluster.url}/proxy/{board}/data/environment").status_code == 401
    cluster.det("tensorboard", "kill", board)
    wait_state(cluster, "tensorboard", board, "STATE_TERMINATED")


def test_jobs_pip_install_packages_of_their_own(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    ctx = tmp_path / "ctx"
    (ctx / "wheels").mkdir(parents=True)
    for name in ("tinypkg", "otherpkg"):
        file_name, data = wheel(name, "1.0")
        (ctx / "wheels" / file_name).write_bytes(data)
    local = "--no-index --find-links ./wheels"

    # OpenPAI's own example's shape: `pip --quiet install scipy && python train.py`
    r = cluster.det("cmd", "run", "-c", str(ctx), f"pip --quiet install {local} tinypkg && "
                    "python3 -c 'import tinypkg; print(\"got\", tinypkg.VERSION)'")
    assert "got 1.0" in r.stdout, r.stdout + r.stderr

    # Determined's: a startup hook pip installs; and this platform's environment.pip_requirements.
    (ctx / "startup-hook.sh").write_text(f"pip install --quiet {local} tinypkg\n")
    base = {"entrypoint": "python3 -c 'import tinypkg, otherpkg; print(\"IMPORTED\", otherpkg.__file__)'",
            "searcher": {"name": "single", "metric": "loss", "max_length": 1}}
    runs = {}
    for name, requirements in (("installs", ["--no-index", "--find-links ./wheels", "otherpkg"]),
                               ("fails", ["--no-index", "does-not-exist-anywhere"])):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(
            {**base, "name": name, "environment": {"pip_requirements": requirements}}))
        created = cluster.det("experiment", "create", str(tmp_path / f"{name}.yaml"), str(ctx), "--json")
        runs[name] = json.loads(created.stdout)["id"]
    for exp_id in runs.values():
        cluster.det("experiment", "wait", str(exp_id), timeout=300, check=False)
    trials = {name: json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"][0]
              for name, exp_id in runs.items()}
    logs = {name: cluster.det("trial", "logs", str(t["id"])).stdout for name, t in trials.items()}
    assert trials["installs"]["state"] == "STATE_COMPLETED", logs["installs"][-3000:]
    assert "IMPORTED /run/determined/pip-requirements/" in logs["installs"]
    # max_restarts is Determined's default 5: the failed install ends it after its one run
    assert (trials["fails"]["state"], trials["fails"]["restarts"]) == ("STATE_ERROR", 0), logs["fails"][-3000:]
    assert "No matching distribution found for does-not-exist-anywhere" in logs["fails"]
    assert logs["fails"].count("environment.pip_requirements: installing") == 1
