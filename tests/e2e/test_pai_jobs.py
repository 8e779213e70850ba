"""The OpenPAI guide's distributed example shape on a real cluster, with a real script instead of
TensorFlow: two ``ps_server`` tasks and two ``worker`` tasks over two agents, submitted with
``det pai submit`` (codeDir uploaded). Each task prints its ``PAI_*`` variables and serves on its
``http`` port; each worker reaches every other task over the addresses in
``PAI_TASK_ROLE_*_HOST_LIST``. The workers' role has ``minSucceededTaskCount: 2``: the job ends
SUCCEEDED when both workers exit 0, and the ps tasks, still serving, are stopped."""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx
import pytest

from tests.support.deadline import bounded

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e

DEMO = r'''
import os, socket, sys, threading, time

role, index = os.environ["PAI_CURRENT_TASK_ROLE_NAME"], int(os.environ["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"])
me = f"{role}-{index}"
for key in sorted(k for k in os.environ if k.startswith("PAI_")):
    print(f"{me} env {key}={os.environ[key]}", flush=True)
print(f"{me} agent {os.environ['DET_AGENT_ID']}", flush=True)
try:  # codeDir is the job's code: read-only in the task
    open("code/written.txt", "w").close()
    print(f"{me} code writable", flush=True)
except OSError as e:
    print(f"{me} code read-only (errno {e.errno})", flush=True)
open("output.txt", "w").close()  # the rest of the working directory is the task's
port = int(os.environ["PAI_CONTAINER_HOST_http_PORT_LIST"].split(",")[0])
workers_met = set()

def serve():
    srv = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = srv.accept()
        with conn:
            caller = conn.recv(100).decode().strip()
            conn.sendall(f"{me}\n".encode())
            if caller.startswith("worker-"):
                workers_met.add(caller)

threading.Thread(target=serve, daemon=True).start()
if role != "worker":
    time.sleep(3600)
peers = []
for r in os.environ["PAI_TASK_ROLE_LIST"].split(","):
    for i, host in enumerate(os.environ[f"PAI_TASK_ROLE_{r}_HOST_LIST"].split(",")):
        if (r, i) != (role, index):
            peers.append(host)
deadline = time.time() + 240
for host in peers:
    ip, p = host.rsplit(":", 1)
    while True:
        try:
            with socket.create_connection((ip, int(p)), timeout=5) as s:
                s.sendall(f"{me}\n".encode())
                print(f"{me} reached {s.recv(100).decode().strip()} at {host}", flush=True)
                break
        except OSError:
            if time.time() > deadline:
                print(f"{me} could not reach {host}", flush=True)
                sys.exit(1)
            time.sleep(0.2)
others = int(os.environ["PAI_TASK_ROLE_TASK_COUNT_worker"]) - 1
while len(workers_met) < others:  # stay up until every other worker has reached this one
    if time.time() > deadline:
        sys.exit(2)
    time.sleep(0.1)
print(f"{me} done", flush=True)
'''


def job_json(name: str) -> dict:
    ports = [{"label": "http", "beginAt": 0, "portNumber": 1}, {"label": "ssh", "beginAt": 0, "portNumber": 1}]
    role = {"taskNumber": 2, "cpuNumber": 1, "memoryMB": 512, "portList": ports}
    return {
        "jobName": name, "image": "default", "codeDir": "./code", "virtualCluster": "default", "retryCount": 0,
        "taskRoles": [
            {"name": "ps_server", **role, "gpuNumber": 0, "command": "python3 code/demo.py"},
            {"name": "worker", **role, "gpuNumber": 1, "command": "python3 code/demo.py",
             "minSucceededTaskCount": 2},
        ],
        "jobEnvs": {"batch_size": 32},
    }


def wait_final(cluster, name: str, timeout: float = 300) -> dict:
    deadline = time.time() + bounded(timeout)
    while True:
        detail = json.loads(cluster.det("pai", "describe", name, "--json").stdout)
        if detail["jobStatus"]["state"] in ("SUCCEEDED", "FAILED", "STOPPED") and all(
                t["taskState"] not in ("WAITING", "RUNNING")
                for role in detail["taskRoles"].values() for t in role["taskStatuses"]):
            return detail
        assert time.time() < deadline, f"job {name} did not end: {json.dumps(detail)[:3000]}"
        time.sleep(1)


def test_the_guides_ps_and_worker_job_succeeds_when_both_workers_do(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=2)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "demo.py").write_text(DEMO)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job_json("ps-worker")))
    out = cluster.det("pai", "submit", str(job_file)).stdout
    assert "ps-worker" in out
    detail = wait_final(cluster, "ps-worker")
    logs = cluster.det("pai", "logs", "ps-worker").stdout
    assert detail["jobStatus"]["state"] == "SUCCEEDED", logs[-5000:]
    states = {role: [t["taskState"] for t in r["taskStatuses"]] for role, r in detail["taskRoles"].items()}
    assert states == {"worker": ["SUCCEEDED", "SUCCEEDED"], "ps_server": ["STOPPED", "STOPPED"]}, logs[-5000:]
    assert "MinSucceededTaskCount 2" in detail["jobStatus"]["appExitDiagnostics"]

    # every worker reached the three other tasks at the addresses of the HOST_LISTs: in the job's own
    # network, which spans both agents (asserted below)
    for w in ("worker-0", "worker-1"):
        reached = set(re.findall(rf"{w} reached (\S+) at 100\.96\.\d+\.\d+:\d+", logs))
        assert reached == {"ps_server-0", "ps_server-1", "worker-0", "worker-1"} - {w}, logs[-5000:]
        assert f"{w} done" in logs
    # the guide's variables, in its formats, identical for every task
    env = dict(re.findall(r"worker-0 env (PAI_\w+)=(.*)", logs))
    assert env["PAI_JOB_NAME"] == "ps-worker" and env["PAI_TASK_ROLE_LIST"] == "ps_server,worker"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker" and env["PAI_TASK_ROLE_TASK_COUNT_worker"] == "2"
    assert re.fullmatch(r"100\.96\.0\.\d+:\d+,100\.96\.0\.\d+:\d+", env["PAI_TASK_ROLE_ps_server_HOST_LIST"])
    assert re.fullmatch(r"http:\d+;ssh:\d+", env["PAI_CONTAINER_HOST_PORT_LIST"])
    assert env["PAI_RESOURCE_worker"] == "1,1,512,64"
    ps1 = dict(re.findall(r"ps_server-1 env (PAI_\w+)=(.*)", logs))
    assert ps1["PAI_TASK_ROLE_worker_HOST_LIST"] == env["PAI_TASK_ROLE_worker_HOST_LIST"]
    assert ps1["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1"
    assert "worker-0 code read-only (errno 30)" in logs and "code writable" not in logs, logs[-5000:]
    # the gang spans both agents
    agents = set(re.findall(r"\S+ agent (\S+)", logs))
    assert len(agents) == 2, logs[-5000:]


SSH_JOB = {
    "jobName": "ssh-job", "image": "default", "taskRoles": [
        {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0,
         # worker-0 reaches worker-1 by its alias; the remote side expands its own variables
         "command": "if [ $PAI_TASK_INDEX = 0 ]; then for i in $(seq 1 200); do "
                    "ssh worker-1 'echo reached-$PAI_CURRENT_TASK_ROLE_NAME-$PAI_TASK_INDEX' && break; sleep 0.3; "
                    "done; fi; sleep 600"},
    ],
}


def test_tasks_ssh_to_each_other_by_alias_and_only_the_owner_gets_in(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=1)
    job_file = tmp_path / "ssh.json"
    job_file.write_text(json.dumps(SSH_JOB))
    cluster.det("pai", "submit", str(job_file))
    deadline = time.time() + 180
    while "reached-worker-1" not in (logs := cluster.det("pai", "logs", "ssh-job").stdout):
        assert time.time() < deadline, logs[-4000:]
        time.sleep(1)
    assert "[worker-0] reached-worker-1" in logs

    # the owner, from outside, with the key the master hands only to them
    out = cluster.det("pai", "ssh", "ssh-job", "worker-1", "--", "echo", "outside-$PAI_TASK_ROLE_NAME-$PAI_TASK_INDEX")
    assert out.stdout.strip() == "outside-worker-1"
    key_dir = next((tmp_path / "cluster" / "xdg").rglob("*-ssh-job"))
    assert oct((key_dir / "id_ed25519").stat().st_mode & 0o777) == "0o600"

    # someone else is refused by the master
    with httpx.Client(base_url=cluster.url, timeout=30) as api:
        admin = api.post("/api/v1/auth/login", json={"username": "admin", "password": ""}).json()["token"]
        r = api.post("/api/v1/users", headers={"Authorization": f"Bearer {admin}"},
                     json={"user": {"username": "eve", "role": "user"}, "password": "pw-eve-1", "isHashed": False})
        assert r.status_code == 200, r.text
        eve = api.post("/api/v1/auth/login", json={"username": "eve", "password": "pw-eve-1"}).json()["token"]
        r = api.get("/api/v1/user/determined/jobs/ssh-job/ssh", headers={"Authorization": f"Bearer {eve}"})
        assert r.status_code == 403 and "only the owner of job ssh-job or an admin" in r.json()["message"]
        assert "PRIVATE KEY" not in r.text

    # a key that is not the job's is refused by the task's SSH server
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    target = next(c for c in json.loads(cluster.det("pai", "describe", "ssh-job", "--json").stdout)
                  ["taskRoles"]["worker"]["taskStatuses"] if c["taskIndex"] == 1)
    port = target["containerPorts"]["ssh"]
    r = subprocess.run(["ssh", "-i", str(wrong), "-p", port, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                        f"det@{target['containerIp']}", "echo", "in"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 255 and "in" not in r.stdout.split() and "Permission denied" in r.stderr, r.stderr
    cluster.det("pai", "stop", "ssh-job")


def test_a_task_using_more_than_its_roles_memory_fails_and_the_job_says_memory_is_enforced(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    job = {"jobName": "greedy", "image": "default", "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0,
         "command": "python3 -c 'b = bytearray(64 * 2**20); print(\"64 MB fine\", flush=True); "
                    "c = bytearray(1024 * 2**20); print(\"1 GB too\")'"}]}
    (tmp_path / "greedy.json").write_text(json.dumps(job))
    cluster.det("pai", "submit", str(tmp_path / "greedy.json"))
    detail = wait_final(cluster, "greedy", timeout=120)
    logs = cluster.det("pai", "logs", "greedy").stdout
    assert detail["jobStatus"]["state"] == "FAILED", logs
    assert detail["jobStatus"]["memoryEnforced"] is True and "RLIMIT_DATA" in detail["jobStatus"]["memoryEnforcement"]
    assert "64 MB fine" in logs and "MemoryError" in logs and "1 GB too" not in logs, logs
