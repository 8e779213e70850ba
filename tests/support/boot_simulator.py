"""Boots the instances a cloud emulator "launched" as real local agent processes.

moto and the GCE test server only keep records: nothing runs on their instances. The
simulator closes that gap so registration and scale-down are exercised end to end. Every
`poll_s` it lists the cluster's instances in the emulator and, for each new running one:

* reads the boot script the master gave it (EC2: the `userData` attribute, base64, which
  moto keeps; GCE: the `startup-script` metadata item of the stored insert body);
* starts a tiny per-instance metadata server (IMDSv2 on EC2: token PUT then GETs with the
  token; GCE: `Metadata-Flavor: Google`) whose identity is that instance's id / name and
  whose interruption notice `interrupt()` flips;
* runs the REAL boot script with bash, in its own process group, with DET_AGENT_BIN,
  DET_AGENT_CONFIG_DIR, DET_AGENT_WORK_DIR and DET_METADATA_URL pointing at local things.
  With `image_boot` (the baked image's det-image-boot.sh) it runs that instead, as the image's
  systemd unit does: it fetches the boot script from the metadata server and runs it.

When the instance is gone from the cloud (terminated / deleted, or stopped: the machine is off),
its whole process tree is killed and its metadata server stopped. `stop()` cleans up all.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.processes import descendants

log = logging.getLogger("boot-simulator")
BIN = Path(sys.executable).parent
TAG_CLUSTER = "det-cluster-id"  # provisioners.base.TAG_CLUSTER
MARKER_ENV = "DET_BOOT_SIMULATOR_INSTANCE"  # set on every process of a simulated instance


# -- the per-instance metadata endpoint -------------------------------------------------------


class MetadataServer:
    """EC2 IMDSv2 or the GCE metadata server for one instance, on a loopback port."""

    def __init__(self, cloud: str, instance_id: str, user_data: str | None = None) -> None:
        self.cloud, self.instance_id = cloud, instance_id
        self.user_data = user_data  # EC2 /latest/user-data, GCE's startup-script attribute (the baked image reads it)
        self.interrupted_at: datetime | None = None
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self._tokens: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return

            def _reply(self, status: int, body: str = "") -> None:
                data = body.encode()
                server.requests.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                if server.cloud == "aws" and self.path == "/latest/api/token":
                    if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                        return self._reply(400, "missing TTL header")
                    token = secrets.token_urlsafe(16)
                    server._tokens.add(token)
                    return self._reply(200, token)
                self._reply(404, "not found")

            def do_GET(self) -> None:
                status, body = server._answer(self.path, self.headers)
                self._reply(status, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll: stop()'s shutdown() waits up to one (0.5 s by default).
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"imds-{instance_id}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def interrupt(self) -> None:
        self.interrupted_at = datetime.now(UTC)

    def _answer(self, path: str, headers: Any) -> tuple[int, str]:
        if self.cloud == "aws":
            if headers.get("X-aws-ec2-metadata-token") not in self._tokens:
                return 401, "IMDSv2: a session token is required"  # instances are launched tokens-required
            if path == "/latest/meta-data/instance-id":
                return 200, self.instance_id
            if path == "/latest/user-data" and self.user_data is not None:
                return 200, self.user_data
            if path == "/latest/meta-data/local-ipv4":  # the master's boot script: its public_url
                return 200, "127.0.0.1"
            if path == "/latest/meta-data/spot/instance-action":
                if self.interrupted_at is None:
                    return 404, "not found"
                when = (self.interrupted_at + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
                return 200, json.dumps({"action": "terminate", "time": when})
            return 404, "not found"
        if headers.get("Metadata-Flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header."
        if path == "/computeMetadata/v1/instance/name":
            return 200, self.instance_id
        if path == "/computeMetadata/v1/instance/attributes/startup-script" and self.user_data is not None:
            return 200, self.user_data
        if path == "/computeMetadata/v1/instance/network-interfaces/0/ip":
            return 200, "127.0.0.1"
        if path.startswith("/computeMetadata/v1/instance/preempted"):
            return 200, "TRUE" if self.interrupted_at is not None else "FALSE"
        return 404, "not found"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# -- processes ----------------------------------------------------------------------------------


def _marked(value: str, *, prefix: bool = False) -> list[int]:
    """Processes whose environment says they belong to this simulated instance (or, with
    `prefix`, to any instance whose marker starts with `value`)."""
    needle = f"{MARKER_ENV}={value}".encode()
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(needle) for e in env) if prefix else needle in env:
            found.append(int(p.name))
    return found


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class SimInstance:
    instance_id: str
    cloud: str
    metadata: MetadataServer
    proc: subprocess.Popen
    dir: Path
    log_path: Path
    marker: str
    booted_at: float = field(default_factory=time.time)
    gone_at: float | None = None
    exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self.gone_at is None and self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def kill(self, grace_s: float = 0.0) -> None:
        """The machine goes away: its whole process tree (the agent's trials live in their own
        sessions, so the process group alone is not enough) and its metadata server."""
        if grace_s > 0 and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for _ in range(3):
            victims = set(descendants(self.proc.pid)) | set(_marked(self.marker))
            if self.proc.poll() is None:
                victims.add(self.proc.pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _kill(sorted(victims), signal.SIGKILL)
            if not victims:
                break
            time.sleep(0.05)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.exit_code = self.proc.returncode
        self.metadata.stop()
        self.gone_at = self.gone_at or time.time()


# -- the simulator ------------------------------------------------------------------------------


class BootSimulator:
    """`BootSimulator.ec2(...)` / `BootSimulator.gce(...)`, then `start()`; `stop()` at the end.

    `agent_args` are appended to det-agent's command line through a tiny wrapper that stands in
    for the baked image's binary (the boot script passes no slot count: with `--slots 1
    --slot-type cpu` the simulated machine's shape does not depend on this host's GPUs).
    Instances are those tagged (labelled) `tag_key` = `cluster_id` (any value without one);
    `image_boot` boots them through the baked image's boot script (see the module docstring).
    """

    def __init__(self, cloud: str, work_dir: Path, *, cluster_id: str | None = None, poll_s: float = 0.3,
                 agent_args: list[str] | None = None, env: dict[str, str] | None = None,
                 ec2_client: Any = None, gce_state: Any = None, tag_key: str = TAG_CLUSTER,
                 image_boot: Path | None = None) -> None:
        if cloud not in ("aws", "gcp"):
            raise ValueError(f"cloud must be aws or gcp, got {cloud!r}")
        self.cloud, self.cluster_id, self.poll_s = cloud, cluster_id, poll_s
        self.tag_key, self.image_boot = tag_key, image_boot
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.ec2, self.gce_state = ec2_client, gce_state
        self.instances: dict[str, SimInstance] = {}
        self.errors: list[str] = []  # boot failures (bad user data, ...), for assertions
        self.run_id = secrets.token_hex(4)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending_terminations: list[tuple[float, str]] = []
        self.agent_bin = str(BIN / "det-agent")
        if agent_args:
            wrapper = self.work_dir / "det-agent-wrapper"
            quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in agent_args)
            wrapper.write_text(f'#!/bin/bash\nexec "{self.agent_bin}" "$@" {quoted}\n')
            wrapper.chmod(0o755)
            self.agent_bin = str(wrapper)

    @classmethod
    def ec2(cls, endpoint_url: str, work_dir: Path, *, region: str = "us-west-2", **kw: Any) -> BootSimulator:
        import boto3

        client = boto3.session.Session().client("ec2", region_name=region, endpoint_url=endpoint_url)
        return cls("aws", work_dir, ec2_client=client, **kw)

    @classmethod
    def gce(cls, state: Any, work_dir: Path, **kw: Any) -> BootSimulator:
        """`state` is the GceTestServer's `state` (tests/provisioners/gce_server.py)."""
        return cls("gcp", work_dir, gce_state=state, **kw)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> BootSimulator:
        self._thread = threading.Thread(target=self._loop, name="boot-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for inst in self.instances.values():
                if inst.gone_at is None:
                    inst.kill()
        # Anything that slipped through (a process forked while we were killing).
        _kill(_marked(f"{self.run_id}/", prefix=True), signal.SIGKILL)

    def __enter__(self) -> BootSimulator:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # -- what tests use -----------------------------------------------------------------------

    def interrupt(self, instance_id: str, *, terminate_after_s: float | None = None) -> None:
        """The cloud takes a spot / preemptible instance back: the notice appears in its metadata
        at once, and with `terminate_after_s` the instance is removed from the cloud that much later
        (EC2: TerminateInstances; GCE: deleted, as `instance_termination_action: DELETE` does)."""
        with self._lock:
            inst = self.instances[instance_id]
            inst.metadata.interrupt()
            if terminate_after_s is not None:
                self._pending_terminations.append((time.monotonic() + terminate_after_s, instance_id))

    def live(self) -> list[str]:
        with self._lock:
            return [i for i, inst in self.instances.items() if inst.gone_at is None]

    def gone(self) -> list[str]:
        with self._lock:
            return [i for i, inst in self.instances.items() if inst.gone_at is not None]

    def describe(self) -> str:
        """A readable account for assertion messages."""
        lines = [f"boot errors: {self.errors}"] if self.errors else []
        with self._lock:
            for i, inst in self.instances.items():
                lines.append(f"--- {i} ({'gone' if inst.gone_at else 'live'}, exit {inst.proc.poll()}):")
                lines.append(inst.log_tail(15))
        return "\n".join(lines)

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._tick()
            except Exception as e:  # noqa: BLE001 - an emulator hiccup: try again next round
                log.warning("boot simulator tick failed: %s", e)
            self._stopping.wait(self.poll_s)

    def _tick(self) -> None:
        self._terminate_due()
        running, present = self._list()  # {id: boot script} for running ones; ids not yet gone
        for instance_id, script in running.items():
            if instance_id not in self.instances and not self._stopping.is_set():
                self._boot(instance_id, script)
        with self._lock:
            vanished = [inst for i, inst in self.instances.items() if inst.gone_at is None and i not in present]
        for inst in vanished:
            log.info("instance %s is gone from the cloud: killing its processes", inst.instance_id)
            inst.kill()

    def _terminate_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [i for t, i in self._pending_terminations if t <= now]
            self._pending_terminations = [(t, i) for t, i in self._pending_terminations if t > now]
        for instance_id in due:
            if self.cloud == "aws":
                self.ec2.terminate_instances(InstanceIds=[instance_id])
            else:
                with self.gce_state.lock:
                    for key in [k for k in self.gce_state.instances if k[2] == instance_id]:
                        del self.gce_state.instances[key]

    def _list(self) -> tuple[dict[str, str | None], set[str]]:
        return self._list_ec2() if self.cloud == "aws" else self._list_gce()

    def _list_ec2(self) -> tuple[dict[str, str | None], set[str]]:
        filters = ([{"Name": f"tag:{self.tag_key}", "Values": [self.cluster_id]}] if self.cluster_id
                   else [{"Name": "tag-key", "Values": [self.tag_key]}])
        running: dict[str, str | None] = {}
        present: set[str] = set()
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    iid, state = raw["InstanceId"], raw.get("State", {}).get("Name")
                    if state in ("terminated", "shutting-down", "stopping", "stopped"):
                        continue  # gone, or switched off: nothing runs on it
                    present.add(iid)
                    if state == "running":
                        running[iid] = None  # read lazily: only for instances not yet booted
        for iid in running:
            if iid not in self.instances:
                attr = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
                value = (attr.get("UserData") or {}).get("Value")
                running[iid] = base64.b64decode(value).decode() if value else None
        return running, present

    def _list_gce(self) -> tuple[dict[str, str | None], set[str]]:
        with self.gce_state.lock:
            items = [json.loads(json.dumps(v)) for v in self.gce_state.instances.values()]
        running: dict[str, str | None] = {}
        present: set[str] = set()
        for inst in items:
            labels = inst.get("labels") or {}
            if self.tag_key not in labels or (self.cluster_id and labels[self.tag_key] != _label(self.cluster_id)):
                continue
            present.add(inst["name"])
            if inst.get("status") == "RUNNING":
                meta = {i.get("key"): i.get("value") for i in (inst.get("metadata") or {}).get("items", [])}
                running[inst["name"]] = meta.get("startup-script")
        return running, present

    def _boot(self, instance_id: str, script: str | None) -> None:
        if not script:
            self.errors.append(f"{instance_id}: no boot script in the instance's "
                               f"{'user data' if self.cloud == 'aws' else 'startup-script metadata'}")
            # Remember it so it is not retried every round; nothing runs on it, like a bad image.
        base = self.work_dir / instance_id
        base.mkdir(parents=True, exist_ok=True)
        script_path = base / ("user-data.sh" if self.cloud == "aws" else "startup-script.sh")
        script_path.write_text(script or "#!/bin/bash\nexit 1\n")
        metadata = MetadataServer(self.cloud, instance_id, user_data=script)
        marker = f"{self.run_id}/{instance_id}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DET_MASTER", "PYTEST_"))}
        if self.image_boot is not None:  # what the image's systemd unit gives it (image.env may override)
            env.update({"DET_IMAGE_CLOUD": self.cloud, "DET_IMAGE_BOOT_DIR": str(base / "run")})
        env.update(self.env)
        env.update({
            "DET_AGENT_BIN": self.agent_bin,
            "DET_AGENT_CONFIG_DIR": str(base / "etc"),
            "DET_AGENT_WORK_DIR": str(base / "work"),
            "DET_METADATA_URL": metadata.url,
            MARKER_ENV: marker,
        })
        log_path = base / "boot.log"
        with open(log_path, "ab") as out:
            boot = self.image_boot if self.image_boot is not None else script_path
            proc = subprocess.Popen(["bash", str(boot)], env=env, cwd=base, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self.instances[instance_id] = SimInstance(instance_id, self.cloud, metadata, proc, base, log_path, marker)
        log.info("booted %s (pid %d, metadata %s)", instance_id, proc.pid, metadata.url)


def _label(value: str) -> str:
    from provisioners.base import sanitize_label

    return sanitize_label(value)
