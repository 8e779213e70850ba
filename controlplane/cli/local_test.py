"""``det experiment create --local --test-mode CONFIG CONTEXT``: a compressed run of the experiment
on this machine, with no master, that says which step passed and which failed.

One trial (the searcher's first hyperparameter sample) runs from a temporary copy of the context
exactly as an agent would start it: the entrypoint (a script; ``model_def:MyTrial``, or a launcher's
``--trial``, runs ``python3 -m controlplane.exec.harness``), the task's info files and ``DET_*``
environment, and a small recording master on loopback in this process, so ``core.init()`` behaves
as on the cluster. The searcher length is cut to a few batches (one epoch for epoch lengths) and
checkpoints go to a temporary ``shared_fs``. Then a second run is started from the checkpoint the
first one reported, for as much again, to check that it resumes instead of starting over.

Steps: the run exits 0; training metrics; validation metrics with the searcher's metric; a
checkpoint whose files are in storage; the resumed run exits 0 and reports only past the
checkpoint. Exit status 0 only when every step passed; ``--json`` prints the steps as JSON.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from collections import deque
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from controlplane.cli import context as ctx
from controlplane.cli.errors import CliError
from controlplane.config.stored import searcher_from

TEST_BATCHES = 4
RUN_TIMEOUT_S = 900.0
TRIAL_ID, EXPERIMENT_ID = 1, 1
TRIAL_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
HARNESS = "controlplane.exec.harness"


# ---- a master that records what the trial reports ---------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a task that exits drops its long poll
            super().handle_error(request, client_address)


class RecordingMaster:
    """Answers the task-side calls of the core API on loopback and keeps what they carried."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.metrics: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.early_exits: list[str] = []
        self.run = 0
        self.searcher: dict[str, Any] = {}
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.1,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _best(self, metric: str | None, smaller: bool) -> float | None:
        values = [m["metrics"]["avgMetrics"].get(metric) for m in self.metrics if m["group"] == "validation"]
        nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return (min(nums) if smaller else max(nums)) if nums else None

    def answer(self, method: str, path: str, query: dict[str, Any], body: Any,
               searcher: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            if method == "POST" and path == "/api/v1/runs/start":
                return 200, {"storageId": None}
            if method == "POST" and path.endswith("/metrics/batch"):
                for report in (body or {}).get("reports") or []:
                    self.metrics.append({**report, "run": self.run})
                return 200, {}
            if method == "POST" and re.fullmatch(r"/api/v1/trials/\d+/metrics", path):
                m = (body or {}).get("metrics") or {}
                self.metrics.append({"group": body.get("group"), "stepsCompleted": m.get("stepsCompleted"),
                                     "metrics": m.get("metrics") or {}, "run": self.run})
                return 200, {}
            if method == "POST" and path == "/api/v1/checkpoints":
                if (body or {}).get("state") == "STATE_COMPLETED":
                    self.checkpoints.append({**body, "run": self.run})
                return 200, {}
            if method == "GET" and path.startswith("/api/v1/checkpoints/"):
                found = [c for c in self.checkpoints if c["uuid"] == path.rsplit("/", 1)[1]]
                if not found:
                    return 404, {"message": "checkpoint not found"}
                return 200, {"checkpoint": {"uuid": found[-1]["uuid"], "metadata": found[-1]["metadata"],
                                            "resources": found[-1].get("resources") or {}}}
            if method == "POST" and path.endswith("/early_exit"):
                self.early_exits.append(str((body or {}).get("reason")))
                return 200, {}
            if path.endswith("/best_searcher_validation_metric"):
                view = searcher_from(searcher)
                best = self._best(view.metric, view.smaller_is_better)
                return (404, {"message": "no validation yet"}) if best is None else (200, {"metric": best})
        if method == "GET" and path.endswith("/signals/preemption"):
            time.sleep(min(float((query.get("timeout_seconds") or ["0"])[0]), 1.0))
            return 200, {"preempt": False}
        if method in ("POST", "PATCH") and (path.endswith(("/progress", "/ack_preemption", "/runner/metadata"))
                                            or path == "/api/v1/checkpoints"):
            return 200, {}
        return 404, {"message": f"{method} {path} is not offered in local test mode"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        master = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                url = urlparse(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Grpc-Metadata-x-allocation-token") != f"Bearer {master.token}":
                    status, answer = 401, {"message": "wrong allocation token"}
                else:
                    try:
                        body = json.loads(raw) if raw else None
                    except ValueError:
                        body = None
                    status, answer = master.answer(self.command, url.path, parse_qs(url.query), body,
                                                   master.searcher)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _serve

        return Handler


# ---- what to run ------------------------------------------------------------------------------
def trial_of(entrypoint: str | list[str]) -> str | None:
    """The ``module:Class`` an entrypoint trains (legacy form, or a launcher's ``--trial``), else None."""
    words = shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)
    if len(words) == 1 and TRIAL_SPEC.fullmatch(words[0]):
        return words[0]
    for i, word in enumerate(words):
        if word == "--trial" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--trial="):
            return word.split("=", 1)[1]
    return None


def first_hparams(cfg: Any) -> tuple[dict[str, Any], int]:
    """The hyperparameters and seed of the searcher's first trial."""
    try:
        from controlplane.searchers.base import Create
        from controlplane.searchers.registry import make_searcher

        for action in make_searcher(cfg).initial_actions():
            if isinstance(action, Create):
                return dict(action.hparams), int(action.seed)
    except Exception:  # noqa: BLE001 - a searcher this CLI cannot build: sample like the master would
        pass
    from controlplane.searchers.sampling import sample

    seed = cfg.reproducibility.experiment_seed
    return sample(cfg.hyperparameters, random.Random(seed)), seed


def short_lengths(searcher: dict[str, Any], hparams: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(first run's searcher fields, second run's, a description): a few batches, then as many again."""
    gbs = hparams.get("global_batch_size") if isinstance(hparams.get("global_batch_size"), int) else None
    raw = searcher.get("max_length")
    key = "max_length"
    if raw is None and searcher.get("max_time") is not None:
        raw, key = {str(searcher.get("time_metric") or "batches"): searcher["max_time"]}, "max_time"
    if isinstance(raw, dict) and raw:
        unit, n = next(iter(raw.items()))
    else:
        unit, n = str(searcher.get("unit") or "batches"), raw
    n = int(n) if isinstance(n, int) and not isinstance(n, bool) else TEST_BATCHES
    if unit == "epochs":
        first, what = 1, "1 epoch, then 1 more"
    elif unit == "records":
        step = gbs or 1
        first = min(n, TEST_BATCHES * step)
        what = f"{first} records, then {first} more"
    else:
        unit, first = "batches", min(n, TEST_BATCHES)
        what = f"{first} batches, then {first} more"

    def fields(length: int) -> dict[str, Any]:
        if key == "max_time":
            return {"max_time": length, "time_metric": unit}
        return {"max_length": {unit: length}}

    return fields(first), fields(2 * first), what


@dataclass
class Step:
    name: str
    passed: bool
    detail: str
    warning: bool = False  # passed, but worth a look


@dataclass
class Outcome:
    returncode: int | None
    seconds: float
    tail: list[str] = field(default_factory=list)


def _task_env(master: RecordingMaster, info_dir: Path, trial: dict[str, Any], latest: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DET_") and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                     "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
    py_dir = os.path.dirname(sys.executable)
    env.update({
        "DET_MASTER": master.url, "DET_SESSION_TOKEN": master.token, "DET_INFO_DIR": str(info_dir),
        "DET_CLUSTER_ID": "local-test", "DET_AGENT_ID": "local-test", "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "1.local-test", "DET_ALLOCATION_ID": "1.local-test.1", "DET_TASK_TYPE": "TRIAL",
        "DET_RESOURCES_ID": "1.local-test.1", "DET_RESOURCES_TYPE": "local-process",
        "DET_TRIAL_ID": str(TRIAL_ID), "DET_EXPERIMENT_ID": str(EXPERIMENT_ID),
        "DET_TRIAL_RUN_ID": str(trial["trial_run_id"]), "DET_TRIAL_SEED": str(trial["trial_seed"]),
        "DET_HPARAMS": json.dumps(trial["hparams"]), "DET_EXPERIMENT_CONFIG": json.dumps(trial["config"]),
        "DET_STEPS_COMPLETED": str(trial["steps_completed"]), "DET_USER": os.environ.get("USER", "determined"),
        "PYTHONUNBUFFERED": "1", "PATH": py_dir + os.pathsep + os.environ.get("PATH", ""),
    })
    if latest:
        env["DET_LATEST_CHECKPOINT"] = latest
    return env


def _write_info(info_dir: Path, master: RecordingMaster, trial: dict[str, Any], latest: str | None) -> None:
    info_dir.mkdir(parents=True, exist_ok=True)
    (info_dir / "cluster.json").write_text(json.dumps({
        "master_url": master.url, "cluster_id": "local-test", "agent_id": "local-test", "slot_ids": [0],
        "task_id": "1.local-test", "allocation_id": "1.local-test.1", "session_token": master.token,
        "task_type": "TRIAL", "master_cert_name": None, "master_cert_file": None, "latest_checkpoint": latest}))
    (info_dir / "trial.json").write_text(json.dumps(trial))
    (info_dir / "rendezvous.json").write_text(json.dumps({
        "container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [1]}))


def _command(entrypoint: str | list[str], trial_spec: str | None) -> list[str]:
    """The harness for a Trial class (a launcher's ``--trial`` too: one worker, what it would start),
    else the entrypoint as the agent runs it."""
    if trial_spec is not None:
        return [sys.executable, "-m", HARNESS, trial_spec]
    return ["sh", "-c", entrypoint] if isinstance(entrypoint, str) else [str(a) for a in entrypoint]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], echo: bool, timeout: float) -> Outcome:
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=40)
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
    except OSError as e:
        return Outcome(None, 0.0, [f"cannot start {cmd[0]}: {e.strerror}"])
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if echo:
                print(f"  | {line}", end="" if line.endswith("\n") else "\n", flush=True)
        rc = proc.wait()
    finally:
        timer.cancel()
    if rc == -9 and time.monotonic() - started >= timeout:
        tail.append(f"(killed after {timeout:.0f}s)")
    return Outcome(rc, time.monotonic() - started, list(tail))


def _fmt(metrics: dict[str, Any], limit: int = 4) -> str:
    shown = [(k, v) for k, v in metrics.items() if k not in ("batches", "epochs")][:limit]
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)


def _copy_context(src: Path, dst: Path) -> None:
    entries = ctx.scan(src)
    ctx.check_size(entries)
    dst.mkdir(parents=True)
    for e in entries:
        target = dst / e.relpath
        if e.is_dir:
            target.mkdir(parents=True, exist_ok=True)
        elif e.link_target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(e.link_target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(e.abspath, target)


# ---- the test ---------------------------------------------------------------------------------
def run_local_test(config_text: str, context_dir: Path | None, *, as_json: bool = False,
                   timeout: float = RUN_TIMEOUT_S) -> int:
    from controlplane.config.experiment import parse_experiment_config
    from controlplane.config.yaml_io import load_yaml

    cfg = parse_experiment_config(load_yaml(config_text, "config"))
    config = cfg.to_dict()
    entrypoint = cfg.entrypoint
    trial_spec = trial_of(entrypoint)
    hparams, seed = first_hparams(cfg)
    searcher = dict(config.get("searcher") or {})
    first_len, second_len, what = short_lengths(searcher, hparams)
    echo = not as_json

    def say(msg: str) -> None:
        if not as_json:
            print(msg, flush=True)

    shown = entrypoint if isinstance(entrypoint, str) else shlex.join(entrypoint)
    kind = f"trial {trial_spec}" if trial_spec else f"script: {shown}"
    say(f"Local test of {cfg.name or 'the experiment'} ({kind}), hyperparameters "
        f"{json.dumps(hparams, sort_keys=True)}: {what} after restoring the checkpoint.")
    if (config.get("resources") or {}).get("slots_per_trial", 1) > 1:
        say("  (slots_per_trial > 1: the test runs one worker)")

    work = Path(tempfile.mkdtemp(prefix="det-local-test-"))
    steps: list[Step] = []
    master = RecordingMaster(uuidlib.uuid4().hex)
    passed = False
    try:
        workdir = work / "context"
        if context_dir is not None:
            _copy_context(context_dir, workdir)
        else:
            workdir.mkdir()
        storage = {"type": "shared_fs", "host_path": str(work / "checkpoints"),
                   "save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1}

        def trial_info(length: dict[str, Any], run: int, steps_completed: int) -> dict[str, Any]:
            conf = {**config, "checkpoint_storage": storage,
                    "searcher": {**{k: v for k, v in searcher.items() if k not in ("max_length", "max_time")},
                                 **length}}
            if trial_spec:  # validate and checkpoint at the end; report every batch
                conf.update({"min_validation_period": None, "min_checkpoint_period": None, "scheduling_unit": 1})
            return {"trial_id": TRIAL_ID, "experiment_id": EXPERIMENT_ID, "trial_seed": seed, "hparams": hparams,
                    "config": conf, "steps_completed": steps_completed, "trial_run_id": run, "debug": False,
                    "inter_node_network_interface": None}

        cmd = _command(entrypoint, trial_spec)
        master.searcher = searcher
        # Run 1: a few batches.
        master.run = 1
        info = trial_info(first_len, 1, 0)
        _write_info(work / "info1", master, info, None)
        say(f"run 1: {shlex.join(cmd)}")
        out = _run(cmd, workdir, _task_env(master, work / "info1", info, None), echo, timeout)
        steps.append(_exit_step("run the trial" if trial_spec else "run the entrypoint", out))
        steps.extend(_report_steps(master, 1, searcher.get("metric"), storage))
        ckpts = [c for c in master.checkpoints if c["run"] == 1]
        if ckpts and out.returncode == 0:
            latest = ckpts[-1]
            at = int(latest["metadata"].get("steps_completed", 0))
            master.run = 2
            info = trial_info(second_len, 2, at)
            _write_info(work / "info2", master, info, latest["uuid"])
            say(f"run 2: resuming from checkpoint {latest['uuid']} (step {at})")
            out2 = _run(cmd, workdir, _task_env(master, work / "info2", info, latest["uuid"]), echo, timeout)
            steps.append(_resume_step(master, out2, latest["uuid"], at))
        else:
            steps.append(Step("resume from the checkpoint", False, "skipped: the first run stored no checkpoint"))
        passed = all(s.passed for s in steps)
    finally:
        master.close()
        if passed:
            shutil.rmtree(work, ignore_errors=True)
    if as_json:
        print(json.dumps({"passed": passed, "kind": "trial" if trial_spec else "script", "trial": trial_spec,
                          "hparams": hparams, "steps": [asdict(s) for s in steps],
                          "workdir": None if passed else str(work)}, indent=2))
    else:
        for s in steps:
            print(f"[{'FAIL' if not s.passed else 'WARN' if s.warning else 'PASS'}] {s.name}: {s.detail}")
        failed = [s for s in steps if not s.passed]
        if failed:
            print(f"Local test FAILED: {len(failed)} of {len(steps)} steps failed (files kept in {work}).")
        else:
            print(f"Local test passed: all {len(steps)} steps.")
    return 0 if passed else 1


def _exit_step(name: str, out: Outcome) -> Step:
    if out.returncode == 0:
        return Step(name, True, f"exit 0 after {out.seconds:.1f}s")
    last = "\n".join(f"    {line}" for line in out.tail[-15:])
    why = "could not start" if out.returncode is None else f"exit {out.returncode} after {out.seconds:.1f}s"
    return Step(name, False, f"{why}; last output:\n{last}" if last else why)


def _report_steps(master: RecordingMaster, run: int, metric: str | None, storage: dict[str, Any]) -> list[Step]:
    training = [m for m in master.metrics if m["run"] == run and m["group"] == "training"]
    validation = [m for m in master.metrics if m["run"] == run and m["group"] == "validation"]
    if training:
        steps = [Step("report training metrics", True,
                      f"{len(training)} reports, last at step {training[-1]['stepsCompleted']}: "
                      f"{_fmt(training[-1]['metrics'].get('avgMetrics') or {})}")]
    else:  # a script may report less often than the few batches of a test: not a failure
        steps = [Step("report training metrics", True, "none in this short run (ctx.train.report_training_metrics); "
                      "fine if the code reports every N batches", warning=True)]
    if not validation:
        steps.append(Step("report validation metrics", False,
                          "no validation metrics were reported (ctx.train.report_validation_metrics)"))
    else:
        avg = validation[-1]["metrics"].get("avgMetrics") or {}
        ok = not metric or metric in avg
        detail = f"step {validation[-1]['stepsCompleted']}: {_fmt(avg)}"
        if not ok:
            detail += f"; the searcher's metric {metric!r} is missing (reported: {sorted(avg)})"
        steps.append(Step("report validation metrics", ok, detail))
    ckpts = [c for c in master.checkpoints if c["run"] == run]
    if not ckpts:
        steps.append(Step("store a checkpoint", False, "no checkpoint was reported (ctx.checkpoint.store_path)"))
    else:
        c = ckpts[-1]
        where = Path(storage["host_path"]) / c["uuid"]
        files = [p for p in where.rglob("*") if p.is_file()] if where.is_dir() else []
        size = sum(p.stat().st_size for p in files)
        ok = bool(files)
        steps.append(Step("store a checkpoint", ok,
                          f"{c['uuid']} at step {c['metadata'].get('steps_completed')}: {len(files)} files, "
                          f"{size} bytes" if ok else f"{c['uuid']} was reported but has no files in storage"))
    return steps


def _resume_step(master: RecordingMaster, out: Outcome, uuid: str, at: int) -> Step:
    name = f"resume from checkpoint {uuid[:8]}"
    if out.returncode != 0:
        return _exit_step(name, out)
    reports = [m for m in master.metrics if m["run"] == 2 and isinstance(m.get("stepsCompleted"), int)]
    reports += [{"stepsCompleted": c["metadata"].get("steps_completed"), "group": "checkpoint"}
                for c in master.checkpoints if c["run"] == 2]
    if not reports:
        return Step(name, False, "the resumed run reported nothing")
    early = [r for r in reports if isinstance(r["stepsCompleted"], int) and r["stepsCompleted"] <= at]
    if early:
        return Step(name, False, f"the resumed run reported {early[0]['group']} at step {early[0]['stepsCompleted']}, "
                                 f"not after the checkpoint's step {at}: it started over instead of restoring")
    last = max(r["stepsCompleted"] for r in reports if isinstance(r["stepsCompleted"], int))
    return Step(name, True, f"continued from step {at} to {last}, exit 0 after {out.seconds:.1f}s")


def check_context(context_dir: str | None) -> Path | None:
    if context_dir is None:
        return None
    path = Path(context_dir)
    if not path.is_dir():
        raise CliError(f"context directory {context_dir} does not exist")
    return path
