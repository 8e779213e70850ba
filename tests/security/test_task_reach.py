"""Red team: a task walking every path and port it can see, while another user's task runs beside it.

The attack: on one agent of a real cluster (`det deploy local`, tasks under bubblewrap in networks
of their own), alice's trial keeps a secret in its working directory and in its checkpoint's staging
directory, and serves it over HTTP to anyone who connects; her shell's sshd has a port the agent
forwards from the host. Bob's command, on the same host, is told
every path an attacker could learn (the agent's work dir and join token, the master's data dir, the
cluster's checkpoint host_path and its `.staging`, alice's task dir and staging dir, found on the host
by the test) and every TCP port listening on this host (the master's, the proxy's, alice's shell's,
whatever else runs here) plus alice's server's; it lists the paths and `/proc`, reads alice's
files, writes into her task dir and staging dir, and connects to every port on every address of
the host and on loopback, without credentials, reporting what answered.

It must fail to: see alice's processes, list or read anything of hers or of the agent's and master's
directories, leave a file in any of them, or get an answer from anything but the master (through
its relay: 401 without credentials) and its own server. The test checks the scanner is no blind
one: bob's own server answers it, and so does the master. (`tests/e2e/test_sandbox.py`,
`tests/agent_image/agent/test_sandbox.py` and `test_task_network.py` check each wall by itself; this
is the attacker's one walk over all of them.)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.e2e.conftest import LocalCluster, det, stop_cluster
from tests.support.cluster import database_for, free_port, login, wait_for
from tests.support.deadline import bounded

pytestmark = [
    pytest.mark.e2e, pytest.mark.xdist_group("test_task_reach"), pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(b) for b in ("bwrap", "ip", "slirp4netns")),
                       reason="task sandboxes and networks need root, bubblewrap, iproute2 and slirp4netns"),
]

PASSWORD = ""


@pytest.fixture(scope="module")
def cluster(request) -> Iterator[LocalCluster]:
    """One agent (room for alice's trial and shell and bob's command), its data dir (the master's,
    the agent's work dir, the checkpoints) outside /tmp, which every task gets a fresh one of anyway:
    the walls tested are the sandbox's own covers of those directories, as on a host whose data
    lives in /var/lib."""
    root = Path(tempfile.mkdtemp(prefix="det-task-reach-", dir="/var/tmp"))
    root.chmod(0o755)  # so that only the cluster's own modes and the sandbox's covers keep a task out
    try:
        with database_for(request.node, root / "db") as db_url:
            c = LocalCluster(root / "cluster", free_port(), db_url, agents=1, slots=4)
            try:
                c.up()
                yield c
            finally:
                stop_cluster(c)
    finally:
        shutil.rmtree(root, ignore_errors=True)

ALICE_PY = """\
import http.server, json, os, sys, threading, time
from controlplane import core

secret = sys.argv[1]
with open("alice-secret.txt", "w") as f:
    f.write(secret)

class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = secret.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()
with core.init() as ctx:
    with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "alice-secret.txt").write_text(secret)
        print("ALICE " + json.dumps({"port": server.server_address[1], "pid": os.getpid()}), flush=True)
        time.sleep(240)  # killed by the test once bob is done
"""

BOB_PY = """\
import json, os, socket, threading

args = json.load(open("args.json"))
report = {"uid": os.getuid(), "listed": {}, "read": {}, "written": {}, "answered": {}, "processes": []}

def attempt(fn):
    try:
        return fn()
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return type(e).__name__

for path in args["list"]:
    report["listed"][path] = attempt(lambda: sorted(os.listdir(path))[:100])
for path in args["read"]:
    report["read"][path] = attempt(lambda: open(path, errors="replace").read(200))

def write(path):
    with open(path, "w") as f:
        f.write("written by bob")
    return "written"

for path in args["write"]:
    report["written"][path] = attempt(lambda: write(path))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        cmdline = attempt(lambda: open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
        report["processes"].append(cmdline[:300])

# bob's own server: the scanner must find it, or it proves nothing
own = socket.socket()
own.bind(("0.0.0.0", 0))
own.listen()

def serve():
    while True:
        conn, _ = own.accept()
        conn.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\nbob's own")
        conn.close()

threading.Thread(target=serve, daemon=True).start()
report["own_port"] = own.getsockname()[1]
for host in args["hosts"]:
    for port in sorted(set(args["ports"] + [report["own_port"]])):
        try:
            with socket.create_connection((host, port), timeout=2) as conn:
                conn.settimeout(2)
                conn.sendall(b"GET /api/v1/me HTTP/1.0\\r\\nHost: " + host.encode() + b"\\r\\n\\r\\n")
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""
                report["answered"][f"{host}:{port}"] = data.decode(errors="replace")[:300] or "(no answer)"
        except OSError:
            pass  # refused or unreachable: nothing there for bob
print("REPORT " + json.dumps(report), flush=True)
"""


def host_addresses() -> list[str]:
    """Loopback and every IPv4 address of this host's interfaces."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({"127.0.0.1"} | {line.split()[3].split("/")[0] for line in out.splitlines()})


def listening() -> dict[int, int]:
    """Every TCP socket listening here (IPv4 or IPv6): its inode -> its port."""
    found: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def ports_of(pid: int, sockets: dict[int, int]) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return {port for inode, port in sockets.items() if inode in inodes}


def trial_lines(url: str, token: str, trial_id: int) -> list[str]:
    r = requests.get(f"{url}/api/v1/trials/{trial_id}/logs", headers={"Authorization": f"Bearer {token}"},
                     timeout=30)
    r.raise_for_status()
    return [json.loads(line)["result"]["log"] for line in r.text.splitlines() if line.strip()]


def files_named(root: Path, name: str) -> list[Path]:
    return [p for p in root.rglob(name) if p.is_file()]


def test_a_task_walking_every_path_and_port_reaches_only_the_master_and_itself(cluster, tmp_path):
    def as_user(name: str) -> dict[str, str]:  # a client config dir of its own: no stored session of another
        return {**cluster.env, "XDG_CONFIG_HOME": str(tmp_path / name), "DET_USER": name, "DET_PASS": PASSWORD}

    for name in ("alice", "bob"):
        det("user", "create", name, env=as_user("admin"))  # an empty password: signing in is not what is tested
    as_alice, as_bob = as_user("alice"), as_user("bob")
    admin_token = login(cluster.url, "admin")

    secret = f"alice-secret-{secrets.token_hex(8)}"
    ctx = tmp_path / "alice"
    ctx.mkdir()
    (ctx / "alice_trial.py").write_text(ALICE_PY)
    config = {"name": "alice-keeps-a-secret", "entrypoint": f"python3 alice_trial.py {secret}",
              "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}, "max_restarts": 0}
    (tmp_path / "alice.yaml").write_text(yaml.safe_dump(config))
    exp_id = json.loads(det("experiment", "create", str(tmp_path / "alice.yaml"), str(ctx), "--json",
                            env=as_alice).stdout)["id"]
    auth = {"Authorization": f"Bearer {admin_token}"}

    def alice_ready() -> dict[str, Any] | None:
        trials = requests.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials", headers=auth, timeout=30).json()
        for trial in trials.get("trials", []):
            for line in trial_lines(cluster.url, admin_token, trial["id"]):
                if line.startswith("ALICE "):
                    return json.loads(line.removeprefix("ALICE "))
        return None

    alice = wait_for(alice_ready, bounded(150), "alice's trial to keep its secret and serve it")
    # and a shell of hers: the master booked it a port the agent forwards from this host (its sshd)
    shell_id = det("shell", "start", "--detach", env=as_alice).stdout.strip()

    def shell_address() -> dict[str, Any] | None:
        shell = json.loads(det("shell", "describe", shell_id, "--json", env=as_alice).stdout)
        assert shell["state"] != "STATE_TERMINATED", shell
        return shell["addresses"][0] if shell["state"] == "STATE_RUNNING" and shell["addresses"] else None

    served = wait_for(shell_address, bounded(120), "alice's shell to run")
    data_dir = cluster.data_dir
    host_path = Path(requests.get(f"{cluster.url}/api/v1/experiments/{exp_id}", headers=auth, timeout=30)
                     .json()["config"]["checkpoint_storage"]["host_path"])
    [alice_work_file] = files_named(data_dir / "agents", "alice-secret.txt")
    [alice_staged_file] = files_named(host_path, "alice-secret.txt")
    master_pid = int(cluster.pids()["master"])
    sockets = listening()
    master_ports = ports_of(master_pid, sockets)
    ports = sorted(set(sockets.values()) | {alice["port"], served["hostPort"]})
    assert cluster.port in master_ports and len(master_ports) >= 2, master_ports  # the API and the proxy

    alice_dir, alice_staging = alice_work_file.parent, alice_staged_file.parent
    walls = [str(data_dir), str(data_dir / "agents"), str(alice_dir), str(alice_dir.parent), str(host_path),
             str(host_path / ".staging"), str(alice_staging), str(alice_staging.parent)]
    args = {
        "list": ["/", "/run", "/run/determined", "/proc", *walls],
        "read": [str(alice_work_file), str(alice_staged_file), str(data_dir / "join-token"),
                 str(data_dir / "master.db"), f"/proc/{alice['pid']}/environ", f"/proc/{master_pid}/environ"],
        "write": [str(alice_dir / "written-by-bob"), str(alice_staging / "written-by-bob"),
                  str(host_path / "written-by-bob"), str(host_path / ".staging" / "written-by-bob")],
        "hosts": host_addresses(),
        "ports": ports,
    }
    bob_ctx = tmp_path / "bob"
    bob_ctx.mkdir()
    (bob_ctx / "walk.py").write_text(BOB_PY)
    (bob_ctx / "args.json").write_text(json.dumps(args))
    out = det("cmd", "run", "-c", str(bob_ctx), "python3", "walk.py", env=as_bob, timeout=180).stdout
    report = json.loads(next(ln for ln in out.splitlines() if ln.startswith("REPORT ")).removeprefix("REPORT "))
    # her shell's port was there all along: this host reaches it (its sshd's banner), bob did not
    with socket.create_connection((served["hostIp"], served["hostPort"]), timeout=10) as conn:
        conn.settimeout(10)
        assert conn.recv(100).startswith(b"SSH-2.0-")
    # alice's files, as she left them
    assert alice_work_file.read_text() == secret and alice_staged_file.read_text() == secret
    assert not files_named(data_dir, "written-by-bob") and not files_named(host_path, "written-by-bob")
    requests.post(f"{cluster.url}/api/v1/experiments/{exp_id}/kill", headers=auth, timeout=30)
    det("shell", "kill", shell_id, env=as_alice)

    shown = json.dumps(report, indent=1)
    print(f"what bob saw:\n{shown}")  # shown with a failure
    assert secret not in shown, f"bob read alice's secret:\n{shown}"
    assert report["uid"] != 0
    # no process of alice's, the agent's or the master's
    assert not [p for p in report["processes"] if "alice_trial" in p or "det-agent" in p or "det-master" in p], shown
    # every wall: not there, refused, or an empty cover
    opened = {p: v for p, v in report["listed"].items() if p in walls and isinstance(v, list) and v}
    assert not opened, f"bob listed what is not his:\n{json.dumps(opened, indent=1)}"
    assert [p for p, v in report["read"].items() if not (v == "missing" or v.endswith("Error"))] == [], shown
    assert [p for p, v in report["written"].items() if v == "written"] == [], shown

    # the scanner works: bob's own server answers, and the master does, through its relay, refusing him
    answered = report["answered"]
    own = {k for k, v in answered.items() if k.endswith(f":{report['own_port']}") and "bob's own" in v}
    assert f"127.0.0.1:{report['own_port']}" in own, shown
    master = f"127.0.0.1:{cluster.port}"
    assert answered.get(master, "").startswith("HTTP/1.1 401"), shown
    others = {k: v for k, v in answered.items() if k not in own and k != master}
    assert not others, f"bob reached more than the master and himself:\n{json.dumps(others, indent=1)}"
