"""How much of Determined 0.38.1's unmodified client works against this master (issue 27).

Starts a cluster of its own (`det deploy local up`: 2 agents of 2 slots, the master on a PostgreSQL
database made for the run and dropped after it, every agent offering the real ``determined==0.38.1``
venv as the task environment ``determined-0.38.1``), then runs three groups of checks with that
venv's own ``det`` and Python, and scores them:

- ``cli`` (94): ``det`` invocations over every command group a Determined user uses on a cluster:
  experiment, trial, checkpoint, model, user, token, job, agent, slot, resource-pool, master, cmd,
  shell, notebook, tensorboard, task, template, workspace, project, version. Each checks what the
  command printed (and, where the command only acknowledges, what the master then answers), with a
  timeout per command; commands that would follow logs or open a browser run with ``--detach`` /
  ``--no-browser`` or end by themselves.
- ``sdk`` (63): calls of ``determined.experimental.client`` in the client's own interpreter (one
  script; each call in try/except, one JSON line per call): users, workspaces and projects,
  experiments (create, wait, list filters, lifecycle, labels, move, delete), trials (metrics
  iterators and streams, summary metrics, logs, checkpoints, kill), checkpoints (download, metadata,
  delete) and models.
- ``harness`` (16): Determined's own harness inside tasks, as its users run it: the Core API
  tutorials 0-4 (metrics, checkpoints and their download, pause/resume, warm start, cancel, a custom
  shared_fs storage_path, adaptive ASHA stopping trials early, 4 workers over two agents), and the
  ``mnist_pytorch`` tutorial's ``PyTorchTrial`` under ``pytorch.Trainer`` on 1 and 2 slots, with only
  its data loader made synthetic (no download).

The workloads are Determined's own files: the Core API tutorials 1-4 from
``tests/e2e/determined_tutorials`` and, embedded below (byte for byte from determined-ai/determined
at tag v0.38.1, commit 6bcda5dd; Apache License 2.0, see tests/e2e/determined_tutorials/LICENSE),
tutorial 0 and ``examples/tutorials/mnist_pytorch``'s ``train.py``, ``model.py``, ``const.yaml`` and
``distributed.yaml``; only ``data.py`` is ours (synthetic tensors of MNIST's shape). The harness
scenarios are submitted together, in the order a user might (the 4-slot tutorial 4 ahead of the mnist
trials), so the pool's scheduler decides what runs when; ``--no-preemption`` gives the default pool
Determined's own default (``scheduler: {type: priority, preemption: false}``). The commands that act
on running work use a trial of ours that runs until told to stop (Core API ``should_preempt``).

Prints a table of every check (group, name, PASS/FAIL, one line of why), then each failure's last
command and its output, and ends with one key=value line.

    .venv/bin/python benchmarks/determined_client_score.py                 # all three groups
    .venv/bin/python benchmarks/determined_client_score.py --only cli      # or sdk, harness
    .venv/bin/python benchmarks/determined_client_score.py --extra         # + unscored 0.38.1 probes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".cache" / "determined-0.38.1-venv"
TUTORIALS = ROOT / "tests" / "e2e" / "determined_tutorials"
ENVIRONMENT = "determined-0.38.1"
PG_ADMIN_URL = os.environ.get("DET_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
EXPECTED = {"cli": 94, "sdk": 63, "harness": 16}
PASSWORD = "Passw0rdX"  # meets the client's complexity check
NEW_PASSWORD = "Newpassw0rdY"

T = TypeVar("T")

# --- Determined's own files (v0.38.1, commit 6bcda5dd3426ce682ea54e2b55115aa9478dbe0e; Apache-2.0) ---

TUTORIAL_0_PY = '''"""
Let's pretend our goal is to increment an integer over and over.  It'll be fun.

Stage 0 is intended to look like a completely unmodified "training" script.
Presumably you already have your own training script, that's a lot more complex
than this.  By following these examples you can get an idea of how to modify
your own script to integrate with the Core API.
"""

import logging
import sys
import time


def main(increment_by):
    x = 0
    for batch in range(100):
        x += increment_by
        time.sleep(0.1)
        print(f"x is now {x}")


if __name__ == "__main__":
    main(increment_by=1)
'''

TUTORIAL_0_YAML = """name: core-api-stage-0
entrypoint: python3 0_start.py

# Use the single-searcher to run just one instance of the training script
searcher:
   name: single
   # metric is required but it shouldn't hurt to ignore it at this point.
   metric: x

max_restarts: 0
"""

MNIST_TRAIN_PY = '''"""
This example shows how to interact with the Determined PyTorch training APIs to
build a basic MNIST network.

In the `__init__` method, the model and optimizer are wrapped with `wrap_model`
and `wrap_optimizer`. This model is single-input and single-output.

The methods `train_batch` and `evaluate_batch` define the forward pass
for training and evaluation respectively.

Then, configure and run the training loop with the PyTorch Trainer API.
The model can be trained either locally or on-cluster with the same training code.

"""
import argparse
import logging
import pathlib
from typing import Any, Dict

import data
import model
import torch
from ruamel import yaml
from torch import nn

import determined as det
from determined import pytorch


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: Dict) -> None:
        self.context = context

        # Trial-level constants.
        self.data_dir = pathlib.Path("data")
        self.batch_size = 64
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()

        # Define loss function.
        self.loss_fn = nn.NLLLoss()

        # Define model.
        self.model = self.context.wrap_model(model.build_model(hparams=hparams))

        # Configure optimizer.
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"])
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(self.data_dir, train=True)
        return pytorch.DataLoader(train_data, batch_size=self.per_slot_batch_size)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(self.data_dir, train=False)
        return pytorch.DataLoader(validation_data, batch_size=self.per_slot_batch_size)

    def train_batch(
        self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int
    ) -> Dict[str, torch.Tensor]:
        batch_data, labels = batch

        output = self.model(batch_data)
        loss = self.loss_fn(output, labels)

        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)

        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> Dict[str, Any]:
        batch_data, labels = batch

        output = self.model(batch_data)
        validation_loss = self.loss_fn(output, labels).item()

        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(batch_data)

        return {
            "validation_loss": validation_loss,
            "accuracy": accuracy,
        }


def run(max_length, local: bool = False):
    """Initializes the trial and runs the training loop.

    This method configures the appropriate training parameters for both local and on-cluster
    training modes. It is an example of a standalone training script that can run both locally and
    on-cluster without any code changes.

    To run the training code solely locally or on-cluster, remove the conditional parameter logic
    for the unneeded training mode.

    Arguments:
        local: Whether to run this script locally. Defaults to false (on-cluster training).
    """

    info = det.get_cluster_info()

    if local:
        # For convenience, use hparams from const.yaml for local mode.
        yml = yaml.YAML(typ="safe", pure=True)
        conf = yml.load(pathlib.Path("./const.yaml").read_text())
        hparams = conf["hyperparameters"]
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams  # Get instance of hparam values from Determined cluster info.
        latest_checkpoint = (
            info.latest_checkpoint
        )  # (Optional) Configure checkpoint for pause/resume functionality.

    with pytorch.init() as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=max_length,
            latest_checkpoint=latest_checkpoint,
            validation_period=pytorch.Batch(100),
        )


if __name__ == "__main__":
    # Configure logging
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    # Parse command line options
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    if args.batches:
        max_length = pytorch.Batch(args.batches)
    elif args.epochs:
        max_length = pytorch.Epoch(args.epochs)
    else:
        # default training length
        max_length = pytorch.Batch(100)

    local_training = det.get_cluster_info() is None
    run(max_length, local=local_training)
'''

MNIST_MODEL_PY = '''from typing import Any, Dict

import torch
from torch import nn

from determined import pytorch


class Flatten(nn.Module):
    def forward(self, *args: pytorch.TorchData, **kwargs: Any) -> torch.Tensor:
        assert len(args) == 1
        x = args[0]
        assert isinstance(x, torch.Tensor)
        return x.contiguous().view(x.size(0), -1)


def build_model(hparams: Dict) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(
            hparams["n_filters1"],
            hparams["n_filters2"],
            3,
        ),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout2d(hparams["dropout1"]),
        Flatten(),
        nn.Linear(144 * hparams["n_filters2"], 128),
        nn.ReLU(),
        nn.Dropout2d(hparams["dropout2"]),
        nn.Linear(128, 10),
        nn.LogSoftmax(),
    )
'''

MNIST_CONST_YAML = """name: mnist_pytorch_const
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
entrypoint: python3 train.py --epochs 1
"""

MNIST_DISTRIBUTED_YAML = """name: mnist_pytorch_distributed
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
resources:
  slots_per_trial: 8
entrypoint: >-
  python3 -m determined.launch.torch_distributed
  python3 train.py --epochs 1
"""

# Ours: the one file changed. MNIST's shapes (1x28x28 images, 10 classes) without torchvision or a
# download; 1,280 training images are 20 batches of 64 an epoch (on 2 slots, 20 of 32 per worker).
MNIST_SYNTHETIC_DATA_PY = '''import pathlib
from typing import Any

import torch


def get_dataset(data_dir: pathlib.Path, train: bool) -> Any:
    generator = torch.Generator().manual_seed(0 if train else 1)
    count = 1280 if train else 128
    images = torch.randn(count, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (count,), generator=generator)
    return torch.utils.data.TensorDataset(images, labels)
'''
MNIST_EPOCH_BATCHES = 20

# Ours: a trial that runs until it is told to stop, through Determined's Core API.
SLEEPER_PY = """import logging
import time

import determined as det

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        for _ in range(3600):
            time.sleep(0.5)
            if core_context.preempt.should_preempt():
                logging.info("preempted: exiting")
                break
"""


# --- results ---


class Fail(Exception):
    """A check's verdict: the one line the table shows."""


@dataclass
class Result:
    group: str
    name: str
    ok: bool
    reason: str = ""
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Invocation:
    command: str
    rc: int | None
    stdout: str
    stderr: str

    def tail(self, chars: int = 1500) -> str:
        text = (self.stdout.rstrip() + ("\n--- stderr ---\n" + self.stderr.rstrip() if self.stderr.strip() else ""))
        return text if len(text) <= chars else "..." + text[-chars:]


@dataclass
class Scoreboard:
    results: list[Result] = field(default_factory=list)
    trace: list[Invocation] = field(default_factory=list)  # the current check's commands
    verbose: bool = True

    def check(self, group: str, name: str, fn: Callable[[], T]) -> T | None:
        self.trace = []
        start = time.monotonic()
        value: T | None = None
        try:
            value = fn()
            result = Result(group, name, True)
        except Fail as e:
            result = Result(group, name, False, one_line(str(e)))
        except subprocess.TimeoutExpired as e:
            result = Result(group, name, False, f"timed out after {e.timeout:.0f} s: {e.cmd}")
        except Exception as e:  # noqa: BLE001 (a check's own bug or an unexpected answer is its failure)
            result = Result(group, name, False, one_line(f"{type(e).__name__}: {e}"),
                            traceback.format_exc(limit=3))
        result.seconds = time.monotonic() - start
        if not result.ok and self.trace:
            last = self.trace[-1]
            result.detail = f"$ {last.command}\n(exit {last.rc})\n{last.tail()}\n{result.detail}".rstrip()
        self.results.append(result)
        if self.verbose:
            mark = "PASS" if result.ok else "FAIL"
            print(f"  [{group}] {mark} {name} ({result.seconds:.1f} s){'' if result.ok else ': ' + result.reason}",
                  flush=True)
        return value

    def add(self, result: Result) -> None:
        self.results.append(result)
        if self.verbose:
            mark = "PASS" if result.ok else "FAIL"
            print(f"  [{result.group}] {mark} {result.name}{'' if result.ok else ': ' + result.reason}", flush=True)


def one_line(text: str, limit: int = 220) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def need(value: Any, what: str) -> Any:
    if value is None:
        raise Fail(f"needs {what}, which an earlier check did not provide")
    return value


def expect(condition: object, message: str) -> None:
    if not condition:
        raise Fail(message)


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise Fail(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {str(last)[:200]})")


def rows(table: str) -> list[list[str]]:
    """The cells of the client's plain table (header and rule left out)."""
    lines = [line for line in table.splitlines() if "|" in line]
    return [[cell.strip() for cell in line.split("|")] for line in lines[1:]]


def created_id(out: str) -> int:
    m = re.search(r"Created (?:test )?experiment (\d+)", out)
    if not m:
        raise Fail(f"no 'Created experiment N' in: {out[-300:]}")
    return int(m.group(1))


# --- the cluster ---


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def pg_database() -> Iterator[str]:
    name = f"score_{uuid.uuid4().hex[:10]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def processes_mentioning(text: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (p / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline or text in environ:
            found.append(int(p.name))
    return found


@contextmanager
def local_cluster(work: Path, db_url: str, venv: Path, agents: int, slots: int,
                  preemption: bool | None = None) -> Iterator[str]:
    """`det deploy local up` with the project's det; yields the master's URL; `down` and a SIGKILL of
    whatever of ours still mentions the data dir afterwards. ``preemption``: the default pool's
    ``scheduler.preemption`` (None: the master's own default)."""
    data_dir = work / "cluster"
    master_config = work / "master.yaml"
    settings: dict[str, Any] = {"db": {"url": db_url}, "agent_reconnect_wait": "4s"}
    if preemption is not None:
        settings["resource_pools"] = [{"pool_name": "default",
                                       "scheduler": {"type": "priority", "preemption": preemption}}]
    master_config.write_text(yaml.safe_dump(settings))
    port = free_port()
    det = str(ROOT / ".venv" / "bin" / "det")
    env = {**os.environ, "XDG_CONFIG_HOME": str(work / "xdg")}
    up = [det, "deploy", "local", "up", "--port", str(port), "--agents", str(agents), "--slots-per-agent",
          str(slots), "--data-dir", str(data_dir), "--master-config", str(master_config),
          "--agent-environment", f"{ENVIRONMENT}={venv}"]
    try:
        proc = subprocess.run(up, capture_output=True, text=True, env=env, timeout=240)
        if proc.returncode != 0:
            raise RuntimeError(f"det deploy local up failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([det, "deploy", "local", "down", "--data-dir", str(data_dir)], capture_output=True,
                       env=env, timeout=120)
        for pid in processes_mentioning(str(data_dir)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


class Master:
    """Reads of the master's own REST answers (Determined's paths), to confirm what a command did."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()
        r = self.http.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ""}, timeout=30)
        r.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {r.json()['token']}"

    def get(self, path: str, **params: str | int) -> Any:
        r = self.http.get(f"{self.url}{path}", params=params, timeout=60)
        if r.status_code != 200:
            raise Fail(f"GET {path}: {r.status_code} {r.text[:200]}")
        return r.json()

    def status(self, path: str) -> int:
        return self.http.get(f"{self.url}{path}", timeout=60).status_code

    def experiment(self, exp_id: int) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/experiments/{exp_id}")["experiment"])

    def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"])

    def checkpoints(self, trial_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])

    def checkpoint(self, uuid_: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/checkpoints/{uuid_}")["checkpoint"])

    def metrics(self, trial_id: int, group: str) -> list[tuple[int, dict[str, Any]]]:
        """(total batches, metrics) of each report of ``group``, from Determined's streaming read."""
        r = self.http.get(f"{self.url}/api/v1/trials/metrics/trial_metrics",
                          params={"trialIds": str(trial_id), "group": group}, timeout=60)
        if r.status_code != 200:
            raise Fail(f"GET trial_metrics: {r.status_code} {r.text[:200]}")
        out = []
        for line in r.text.splitlines():
            if not line.strip():
                continue
            for m in json.loads(line).get("result", {}).get("metrics", []):
                values = m["metrics"]
                values = values.get("avg_metrics") or values.get("validation_metrics") or values
                out.append((int(m["totalBatches"]), dict(values)))
        return out

    def live_task_ids(self) -> set[str]:
        return {a["taskId"] for a in self.get("/api/v1/tasks")["allocationIdToSummary"].values()}

    def wait_state(self, exp_id: int, states: tuple[str, ...], timeout_s: float = 300) -> dict[str, Any]:
        return wait_for(lambda: (e := self.experiment(exp_id))["state"] in states and e, timeout_s,
                        f"experiment {exp_id} to reach {'/'.join(states)}", interval_s=1)

    def wait_running(self, exp_id: int, timeout_s: float = 300, run_id: int = 1) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            trials = self.trials(exp_id)
            return next((t for t in trials if t["state"] == "STATE_RUNNING" and t.get("runId", 1) >= run_id), None)
        return wait_for(running, timeout_s, f"a trial of experiment {exp_id} to run", interval_s=0.1)


class RealDet:
    """The unmodified client's ``det``, with a HOME of its own; every call is recorded for the report."""

    def __init__(self, board: Scoreboard, venv: Path, url: str, home: Path) -> None:
        self.board, self.venv, self.url = board, venv, url
        home.mkdir(parents=True, exist_ok=True)
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        self.base.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), DET_MASTER=url,
                         PYTHONWARNINGS="ignore")

    def env(self, user: str | None = "admin", password: str = "") -> dict[str, str]:
        env = dict(self.base)
        if user is not None:
            env.update(DET_USER=user, DET_PASS=password)
        return env

    def __call__(self, *args: str, ok: bool = True, user: str | None = "admin", password: str = "",
                 input: str | None = None, timeout: float = 120,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        command = "det " + " ".join(shlex.quote(a) for a in args)
        try:
            proc = subprocess.run([str(self.venv / "bin" / "det"), *args], capture_output=True, text=True,
                                  env=self.env(user, password), timeout=timeout, input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL, cwd=cwd)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            self.board.trace.append(Invocation(command, None, out, err))
            raise Fail(f"{command}: timed out after {timeout:.0f} s") from None
        self.board.trace.append(Invocation(command, proc.returncode, proc.stdout, proc.stderr))
        if ok:
            if proc.returncode != 0:
                said = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()
                        and "password" not in line.lower() and not line.startswith(("✗", "Warning"))]
                raise Fail(f"exit {proc.returncode}: {said[-1] if said else '(no output)'}")
            if "Traceback (most recent call last)" in proc.stderr:
                raise Fail(f"traceback: {proc.stderr.strip().splitlines()[-1]}")
        return proc


# --- workloads ---


def tutorial_context(work: Path, stage: str) -> Path:
    context = work / "contexts" / stage
    if not context.exists():
        context.mkdir(parents=True)
        if stage == "0_start":
            (context / "0_start.py").write_text(TUTORIAL_0_PY)
        else:
            shutil.copy(TUTORIALS / f"{stage}.py", context)
    return context


def tutorial_config(work: Path, stage: str, stem: str, /, **changes: Any) -> Path:
    text = TUTORIAL_0_YAML if stage == "0_start" else (TUTORIALS / f"{stage}.yaml").read_text()
    config = yaml.safe_load(text)
    config["environment"] = {"image": ENVIRONMENT}
    config.update(changes)
    path = work / "configs" / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def sleep_config(work: Path, name: str) -> tuple[Path, Path]:
    """An experiment whose one trial runs until it is told to stop (a Core API script that checks for
    preemption twice a second): for the commands that act on running work."""
    context = work / "contexts" / "sleeper"
    context.mkdir(parents=True, exist_ok=True)
    (context / "sleeper.py").write_text(SLEEPER_PY)
    config = {"name": name, "entrypoint": "python3 sleeper.py", "searcher": {"name": "single", "metric": "x"},
              "max_restarts": 0, "environment": {"image": ENVIRONMENT}}
    path = work / "configs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path, context


def mnist_context(work: Path) -> Path:
    context = work / "contexts" / "mnist_pytorch"
    if not context.exists():
        context.mkdir(parents=True)
        (context / "train.py").write_text(MNIST_TRAIN_PY)
        (context / "model.py").write_text(MNIST_MODEL_PY)
        (context / "data.py").write_text(MNIST_SYNTHETIC_DATA_PY)
        (context / "const.yaml").write_text(MNIST_CONST_YAML)
        (context / "distributed.yaml").write_text(MNIST_DISTRIBUTED_YAML)
    return context


def mnist_config(work: Path, which: str, stem: str, /, **changes: Any) -> Path:
    config = yaml.safe_load(MNIST_CONST_YAML if which == "const" else MNIST_DISTRIBUTED_YAML)
    config["environment"] = {"image": ENVIRONMENT}
    config.update(changes)
    path = work / "configs" / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


# --- the CLI group ---


def run_cli(board: Scoreboard, det: RealDet, master: Master, work: Path) -> dict[str, Any]:
    g = "cli"
    S: dict[str, Any] = {}
    out_dir = work / "cli-out"
    out_dir.mkdir(parents=True, exist_ok=True)

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    def exp_state(exp_id: int) -> str:
        return str(master.experiment(exp_id)["state"])

    # Cluster, master and version.
    def version() -> None:
        out = det("version").stdout
        found = yaml.safe_load(out)
        expect(found["client"]["version"] == "0.38.1", f"client version {found.get('client')}")
        expect(found["master"]["version"] == "0.38.1" and found["master"].get("cluster_id"),
               f"master section {found.get('master')}")
    check("version", version)

    def master_info() -> None:
        info = json.loads(det("master", "info", "--json").stdout)
        expect(info.get("version") == "0.38.1" and info.get("clusterId"), f"info {str(info)[:200]}")
    check("master info --json", master_info)

    def master_config() -> None:
        config = yaml.safe_load(det("master", "config").stdout)
        expect(isinstance(config, dict) and "db" in config and "checkpoint_storage" in config,
               f"config keys {sorted(config) if isinstance(config, dict) else config}")
    check("master config", master_config)

    def master_logs() -> None:
        lines = [ln for ln in det("master", "logs", "--tail", "5").stdout.splitlines() if ln.strip()]
        expect(0 < len(lines) <= 5, f"{len(lines)} lines for --tail 5")
    check("master logs --tail 5", master_logs)

    def agent_list() -> None:
        agents = json.loads(det("agent", "list", "--json").stdout)
        ids = sorted(a["id"] for a in agents)
        expect(len(ids) == 2 and all(a.get("enabled", True) for a in agents), f"agents {ids}")
        S["agents"] = ids
    check("agent list --json", agent_list)

    def agent_enabled(agent: str) -> bool:
        return bool(next(a for a in json.loads(det("agent", "list", "--json").stdout) if a["id"] == agent)["enabled"])

    def agent_disable() -> None:
        agent = need(S.get("agents"), "the agent list")[1]
        det("agent", "disable", agent)
        expect(not agent_enabled(agent), "agent still enabled after disable")
        det("agent", "enable", agent)
        expect(agent_enabled(agent), "agent still disabled after enable")
    check("agent disable / enable", agent_disable)

    def slots() -> list[tuple[str, str, bool]]:
        return [(s["agent_id"], str(s["slot_id"]), bool(s["enabled"])) for s in
                json.loads(det("slot", "list", "--json").stdout)]

    def slot_list() -> None:
        found = slots()
        expect(len(found) == 4 and all(e for _, _, e in found), f"slots {found}")
    check("slot list --json", slot_list)

    def slot_disable() -> None:
        agent = need(S.get("agents"), "the agent list")[0]
        det("slot", "disable", agent, "1")
        expect((agent, "1", False) in slots(), "slot still enabled")
        det("slot", "enable", agent, "1")
        expect((agent, "1", True) in slots(), "slot still disabled")
    check("slot disable / enable", slot_disable)

    def rp_bindings() -> None:
        out = det("resource-pool", "bindings", "list-workspaces", "default").stdout
        expect("Failed" not in out, out[-200:])
    check("resource-pool bindings list-workspaces", rp_bindings)

    # Users and tokens.
    def whoami() -> None:
        out = det("user", "whoami").stdout
        expect("'admin'" in out, out)
    check("user whoami", whoami)

    def user_create() -> None:
        det("user", "create", "scorer", "--password", PASSWORD)
        expect("scorer" in [r[1] for r in rows(det("user", "list").stdout)], "scorer not in user list")
    check("user create --password", user_create)

    def user_list() -> None:
        names = [r[1] for r in rows(det("user", "list").stdout)]
        expect({"admin", "determined"} <= set(names), f"users {names}")
    check("user list", user_list)

    def user_login() -> None:
        det("user", "login", "scorer", user=None, input=f"{PASSWORD}\n")
        out = det("user", "whoami", user=None).stdout
        expect("'scorer'" in out, f"whoami after login: {out}")
    check("user login (password on stdin)", user_login)

    def change_password() -> None:
        det("user", "change-password", user=None, input=f"{NEW_PASSWORD}\n{NEW_PASSWORD}\n")
        r = requests.post(f"{det.url}/api/v1/auth/login", json={"username": "scorer", "password": NEW_PASSWORD},
                          timeout=30)
        expect(r.status_code == 200, f"login with the new password: {r.status_code}")
    check("user change-password (stdin)", change_password)

    def logout() -> None:
        det("user", "logout", user=None)
        out = det("user", "whoami", user=None).stdout
        expect("'scorer'" not in out, f"still signed in: {out}")
    check("user logout", logout)

    def user_deactivate() -> None:
        det("user", "deactivate", "scorer")
        expect("scorer" not in [r[1] for r in rows(det("user", "list").stdout)], "scorer still listed")
        expect("scorer" in [r[1] for r in rows(det("user", "list", "--all").stdout)], "scorer not in --all")
        det("user", "activate", "scorer")
        users = {r[1]: r for r in rows(det("user", "list").stdout)}
        expect("scorer" in users and users["scorer"][4] == "True", f"scorer row {users.get('scorer')}")
    check("user deactivate / list --all / activate", user_deactivate)

    def user_edit() -> None:
        out = det("user", "edit", "scorer", "--display-name", "Score Bot").stdout
        users = {r[1]: r for r in rows(det("user", "list").stdout)}
        expect(users.get("scorer", [""] * 3)[2] == "Score Bot", f"after edit ({out.strip()}): {users.get('scorer')}")
    check("user edit --display-name", user_edit)

    def token_list() -> None:
        out = det("token", "list").stdout
        expect("USER_SESSION" in out or "ACCESS_TOKEN" in out, out[-300:])
    check("token list", token_list)

    # Workspaces, projects, templates.
    def workspace_create() -> None:
        out = det("workspace", "create", "score-ws").stdout
        expect("score-ws" in out, out[-300:])
        det("workspace", "create", "score-tmp")
    check("workspace create", workspace_create)

    def workspace_list() -> None:
        names = [r[1] for r in rows(det("workspace", "list").stdout)]
        expect({"Uncategorized", "score-ws", "score-tmp"} <= set(names), f"workspaces {names}")
    check("workspace list", workspace_list)

    def workspace_describe() -> None:
        ws = json.loads(det("workspace", "describe", "score-ws", "--json").stdout)
        expect(ws.get("name") == "score-ws" and ws.get("username") == "admin", str(ws)[:300])
    check("workspace describe --json", workspace_describe)

    def project_create() -> None:
        project = json.loads(det("project", "create", "score-ws", "score-proj", "--description", "scored",
                                 "--json").stdout)
        expect(project.get("name") == "score-proj" and project.get("description") == "scored", str(project)[:300])
        det("project", "create", "score-ws", "score-tmp-proj")
        S["project_id"] = project["id"]
    check("project create --json", project_create)

    def project_list() -> None:
        names = [r[2] for r in rows(det("project", "list", "score-ws").stdout)]
        expect({"score-proj", "score-tmp-proj"} <= set(names), f"projects {names}")
    check("project list", project_list)

    def project_delete() -> None:
        det("project", "delete", "score-ws", "score-tmp-proj", "--yes")
        names = [r[2] for r in rows(det("project", "list", "score-ws").stdout)]
        expect("score-tmp-proj" not in names, f"projects {names}")
    check("project delete --yes", project_delete)

    def workspace_archive() -> None:
        det("workspace", "archive", "score-tmp")
        ws = json.loads(det("workspace", "describe", "score-tmp", "--json").stdout)
        expect(ws.get("archived") is True, f"archived: {ws.get('archived')}")
    check("workspace archive", workspace_archive)

    def workspace_delete() -> None:
        out = det("workspace", "delete", "score-tmp", "--yes").stdout
        names = [r[1] for r in rows(det("workspace", "list").stdout)]
        expect("score-tmp" not in names, f"still listed after: {out.strip()}")
    check("workspace delete --yes", workspace_delete)

    template = work / "configs" / "template.yaml"
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(yaml.safe_dump({"max_restarts": 3, "resources": {"priority": 7},
                                        "environment": {"environment_variables": ["FROM_TEMPLATE=1"]}}))

    def template_set() -> None:
        out = det("template", "set", "score-tpl", str(template)).stdout
        expect("score-tpl" in out, out)
        expect("score-tpl" in det("template", "list").stdout, "score-tpl not listed")
    check("template set / list", template_set)

    def template_describe() -> None:
        shown = yaml.safe_load(det("template", "describe", "score-tpl").stdout)
        expect(shown.get("max_restarts") == 3 and shown.get("resources", {}).get("priority") == 7, str(shown))
    check("template describe", template_describe)

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
    return S


def run_cli_extra(board: Scoreboard, det: RealDet, S: dict[str, Any], work: Path) -> None:
    """``--extra``: 0.38.1 commands left out of the 94 (less used, deprecated, or another spelling of
    a path the 94 cover), each run once; a pass is an exit 0 without 'Failed'. Printed, not scored."""
    a, ta = S.get("A"), S.get("TA")
    probes: list[tuple[str, list[str], str | None]] = [
        ("master cluster-message set", ["master", "cluster-message", "set", "-m", "score", "--duration", "1h"], None),
        ("master cluster-message get", ["master", "cluster-message", "get"], "score"),
        ("master cluster-message clear", ["master", "cluster-message", "clear"], None),
        ("experiment set log-retention", ["experiment", "set", "log-retention", str(a), "--days", "30"], None),
        ("trial set log-retention", ["trial", "set", "log-retention", str(ta), "--forever"], None),
        ("experiment delete-tb-files", ["experiment", "delete-tb-files", str(a)], None),
        ("experiment logs --tail", ["experiment", "logs", str(a), "--tail", "3"], "report_validation_metrics"),
        ("experiment list-checkpoints --best 1", ["experiment", "list-checkpoints", str(a), "--best", "1"], None),
        ("trial logs --json", ["trial", "logs", str(ta), "--head", "2", "--json"], '"message"'),
        ("trial download --best", ["trial", "download", str(ta), "--best", "-o", str(work / "extra-best")], None),
        ("token create", ["token", "create", "admin", "--description", "score"], None),
        ("token describe", ["token", "describe", "1"], None),
        ("workspace create", ["workspace", "create", "score-extra"], None),
        ("workspace archive", ["workspace", "archive", "score-extra"], None),
        ("workspace unarchive", ["workspace", "unarchive", "score-extra"], None),
        ("project create", ["project", "create", "score-extra", "p-extra"], None),
        ("project archive", ["project", "archive", "score-extra", "p-extra"], None),
        ("project unarchive", ["project", "unarchive", "score-extra", "p-extra"], None),
        ("project edit --description", ["project", "edit", "score-extra", "p-extra", "--description", "d"], None),
        ("workspace edit --name", ["workspace", "edit", "score-extra", "--name", "score-extra2"], None),
        ("user rename", ["user", "rename", "scorer", "scorer2"], None),
    ]
    for name, args, wanted in probes:
        def probe(args: list[str] = args, wanted: str | None = wanted) -> None:
            out = det(*args, timeout=120)
            said = out.stdout + out.stderr
            expect("Failed" not in said, one_line(said[-200:]))
            if wanted:
                expect(wanted in said, f"no {wanted!r} in: {one_line(said[-200:])}")
        board.check("cli-extra", name, probe)


# --- the SDK group: one script in the client's own interpreter, one JSON line per call ---

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


# --- the harness group: Determined's own harness inside tasks ---


def run_harness(board: Scoreboard, det: RealDet, master: Master, work: Path) -> None:
    g = "harness"
    E: dict[str, int] = {}
    notes: dict[str, str] = {}  # what went wrong while setting a scenario up, reported by its check
    out_dir = work / "harness-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    fs_root = work / "shared-fs-checkpoints"
    fs_root.mkdir(parents=True, exist_ok=True)

    def submit(key: str, config: Path, context: Path, *extra: str) -> None:
        try:
            E[key] = created_id(det("experiment", "create", str(config), str(context), *extra).stdout)
        except Fail as e:
            notes[key] = f"create failed: {e}"

    def exp(key: str) -> int:
        if key not in E:
            raise Fail(notes.get(key, f"experiment {key} was not created"))
        return E[key]

    def done(key: str, timeout_s: float = 900) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        exp_id = exp(key)
        e = master.wait_state(exp_id, ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"), timeout_s)
        trials = master.trials(exp_id)
        if e["state"] != "STATE_COMPLETED":
            logs = det("trial", "logs", str(trials[0]["id"]), "--tail", "40", ok=False).stdout if trials else ""
            errors = [line.split("||", 1)[-1] for line in logs.splitlines()
                      if re.search(r"\w+(Error|Exception)\b", line)]
            why = errors[-1] if errors else logs[-400:]
            raise Fail(f"experiment {exp_id} ended {e['state']} (run {trials[0].get('runId') if trials else '?'}): "
                       f"{one_line(why, 300)}")
        return e, trials

    def series(trial_id: int, group: str, metric: str) -> list[tuple[int, Any]]:
        return [(steps, m.get(metric)) for steps, m in master.metrics(trial_id, group) if metric in m]

    def logs(trial_id: int, *extra: str) -> str:
        return det("trial", "logs", str(trial_id), *extra, timeout=180).stdout

    def stored(trial_id: int) -> list[dict[str, Any]]:
        return master.checkpoints(trial_id)

    # Set-up, in queue order. Pause: stage 2 paused as soon as its trial runs, so the pause reaches the
    # script at its first preemption check (after its checkpoint at batch 10); activated once its
    # process has stopped. Cancel: another stage 2, canceled once it runs.
    submit("pause", tutorial_config(work, "2_checkpoints", "h-pause", name="h-pause"),
           tutorial_context(work, "2_checkpoints"))
    try:
        master.wait_running(exp("pause"), 300)
        det("experiment", "pause", str(E["pause"]))
    except Fail as e:
        notes["pause"] = f"pausing it: {e}"
    submit("cancel", tutorial_config(work, "2_checkpoints", "h-cancel", name="h-cancel"),
           tutorial_context(work, "2_checkpoints"))
    try:
        master.wait_running(exp("cancel"), 300)
        time.sleep(1.5)  # past its first checkpoint (batch 10)
        det("experiment", "cancel", str(E["cancel"]))
    except Fail as e:
        notes["cancel"] = f"canceling it: {e}"
    try:
        task_id = master.trials(exp("pause"))[0]["taskId"]
        wait_for(lambda: task_id not in master.live_task_ids(), 300, "the paused trial's process to stop")
        before = [c["metadata"].get("steps_completed") for c in stored(master.trials(E["pause"])[0]["id"])
                  if c["state"] == "STATE_COMPLETED"]
        if not before or max(before) >= 100:
            notes["pause"] = f"it stopped with checkpoints {before}, not mid-run"
        det("experiment", "activate", str(E["pause"]))
    except Fail as e:
        notes.setdefault("pause", f"pause/activate: {e}")

    submit("s0", tutorial_config(work, "0_start", "h-s0", name="h-stage-0"), tutorial_context(work, "0_start"))
    submit("s1", tutorial_config(work, "1_metrics", "h-s1", name="h-stage-1"), tutorial_context(work, "1_metrics"))
    submit("s2", tutorial_config(work, "2_checkpoints", "h-s2", name="h-stage-2"),
           tutorial_context(work, "2_checkpoints"))
    submit("fs", tutorial_config(work, "2_checkpoints", "h-fs", name="h-shared-fs",
                                 checkpoint_storage={"type": "shared_fs", "host_path": str(fs_root),
                                                     "storage_path": "score-storage", "save_experiment_best": 0,
                                                     "save_trial_best": 0, "save_trial_latest": 1}),
           tutorial_context(work, "2_checkpoints"))
    submit("s3", tutorial_config(work, "3_hpsearch", "h-s3", name="h-stage-3"), tutorial_context(work, "3_hpsearch"))
    # Determined's config asks for 8 slots; this cluster has two agents of two.
    submit("s4", tutorial_config(work, "4_distributed", "h-s4", name="h-stage-4", resources={"slots_per_trial": 4}),
           tutorial_context(work, "4_distributed"))
    submit("m1", mnist_config(work, "const", "h-m1"), mnist_context(work))
    submit("m2", mnist_config(work, "distributed", "h-m2", resources={"slots_per_trial": 2}), mnist_context(work))

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    def stage0() -> None:
        _, trials = done("s0")
        out = logs(trials[0]["id"])
        expect("x is now 100" in out and out.count("x is now ") == 100, f"{out.count('x is now ')} lines of x")
    check("core_api 0_start: an unmodified script runs to its end, its prints in the trial logs", stage0)

    def stage1_training() -> None:
        _, trials = done("s1")
        got = series(trials[0]["id"], "training", "x")
        expect(got == [(s, s) for s in range(10, 101, 10)], f"training x {got}")
    check("core_api 1_metrics: training metrics reach the master", stage1_training)

    def stage1_validation() -> None:
        e, trials = done("s1")
        got = series(trials[0]["id"], "validation", "x")
        expect(got == [(100, 100)], f"validation x {got}")
        expect(float(e.get("progress") or 0) == 1.0, f"experiment progress {e.get('progress')}")
    check("core_api 1_metrics: validation metric and report_progress", stage1_validation)

    def stage2_checkpoints() -> None:
        _, trials = done("s2")
        trial_id = trials[0]["id"]

        def collected() -> list[dict[str, Any]] | None:
            found = stored(trial_id)
            states = {c["state"] for c in found}
            return found if states <= {"STATE_COMPLETED", "STATE_DELETED"} and "STATE_DELETED" in states else None
        found = wait_for(collected, 180, "checkpoint GC to delete all but the latest")
        kept = [c for c in found if c["state"] == "STATE_COMPLETED"]
        expect([c["metadata"].get("steps_completed") for c in kept] == [100] and len(found) == 10,
               f"kept {[c['metadata'].get('steps_completed') for c in kept]} of {len(found)}")
        E["s2_trial"], notes["s2_kept"] = trial_id, kept[0]["uuid"]
        # Warm start (runs beside the rest): a new experiment naming that checkpoint as its source.
        submit("warm", tutorial_config(work, "2_checkpoints", "h-warm", name="h-warm-start"),
               tutorial_context(work, "2_checkpoints"),
               "--config", f"searcher.source_checkpoint_uuid={kept[0]['uuid']}")
    check("core_api 2_checkpoints: 10 checkpoints stored, GC keeps the latest", stage2_checkpoints)

    def stage2_download() -> None:
        kept = notes.get("s2_kept")
        expect(kept, "needs the kept checkpoint of the check above")
        target = out_dir / "s2-ckpt"
        det("checkpoint", "download", str(kept), "--output-dir", str(target), "--mode", "master")
        state = (target / "state").read_text() if (target / "state").exists() else "(no state file)"
        expect(state == f"100,100,{E['s2_trial']}", state)
    check("core_api 2_checkpoints: the kept checkpoint downloads with the script's state", stage2_download)

    def pause_resume() -> None:
        if "pause" in notes:
            raise Fail(notes["pause"])
        _, trials = done("pause")
        out = logs(trials[0]["id"])
        expect(out.count("x is now 1\n") == 1, "the resumed run started over instead of from its checkpoint")
        expect("x is now 100" in out and int(trials[0].get("runId") or 0) >= 2, f"runId {trials[0].get('runId')}")
    check("core_api 2_checkpoints: paused mid-run, resumed from its checkpoint", pause_resume)

    def cancel() -> None:
        if "cancel" in notes:
            raise Fail(notes["cancel"])
        e = master.wait_state(exp("cancel"), ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"), 600)
        trial = master.trials(E["cancel"])[0]
        expect(e["state"] == "STATE_CANCELED" and trial["state"] == "STATE_CANCELED",
               f"{e['state']} / {trial['state']}")
        expect(any(c["state"] in ("STATE_COMPLETED", "STATE_DELETED") for c in stored(trial["id"])),
               "no checkpoint stored")
        out = logs(trial["id"])
        expect("[master] killed" not in out and "x is now 100" not in out, one_line(out[-300:]))
    check("core_api 2_checkpoints: canceled mid-run, it stops at its next boundary (no kill)", cancel)

    def shared_fs() -> None:
        _, trials = done("fs")
        kept = [c for c in stored(trials[0]["id"]) if c["state"] == "STATE_COMPLETED"]
        expect(kept, "no completed checkpoint")
        path = fs_root / "score-storage" / kept[-1]["uuid"] / "state"
        expect(path.is_file() and path.read_text().startswith("100,100,"),
               f"{path} missing; under {fs_root}: {[str(p.relative_to(fs_root)) for p in fs_root.rglob('*')][:6]}")
    check("core_api 2_checkpoints: checkpoints in a shared_fs host_path/storage_path of the config", shared_fs)

    def asha_early() -> None:
        _, trials = done("s3")
        expect(len(trials) == 10 and all(t["state"] == "STATE_COMPLETED" for t in trials),
               f"{len(trials)} trials: {[t['state'] for t in trials]}")
        lengths = sorted(int(t["totalBatchesProcessed"]) for t in trials)
        expect(lengths[-1] == 100 and lengths[0] < 100, f"no trial was stopped early: {lengths}")
    check("core_api 3_hpsearch: adaptive_asha stops trials early", asha_early)

    def asha_hparams() -> None:
        _, trials = done("s3")
        for t in trials:
            got = series(t["id"], "validation", "x")
            want = (int(t["totalBatchesProcessed"]), t["hparams"]["increment_by"] * int(t["totalBatchesProcessed"]))
            expect(got and tuple(got[-1]) == want, f"trial {t['id']}: validations {got}, expected last {want}")
    check("core_api 3_hpsearch: each trial's hyperparameter reaches its script", asha_hparams)

    def distributed() -> None:
        _, trials = done("s4")
        t = trials[0]
        step = 4 * t["hparams"]["increment_by"]
        got = series(t["id"], "training", "x")
        expect(got == [(s, s * step) for s in range(10, 101, 10)], f"training x {got} (step {step})")
    check("core_api 4_distributed: 4 workers over two agents, allgather", distributed)

    def distributed_ranks() -> None:
        _, trials = done("s4")
        t = trials[0]
        for rank in range(4):
            out = logs(t["id"], "--rank-id", str(rank))
            expect("worker starting" in out, f"rank {rank}: {one_line(out[-200:])}")
        expect(float(t.get("progress") or 0) == 1.0, f"trial progress {t.get('progress')}")
    check("core_api 4_distributed: each rank's logs (--rank-id), the chief's progress", distributed_ranks)

    def mnist_one() -> None:
        _, trials = done("m1")
        t = trials[0]
        expect(int(t["totalBatchesProcessed"]) == MNIST_EPOCH_BATCHES, f"batches {t['totalBatchesProcessed']}")
        train = series(t["id"], "training", "loss")
        val = master.metrics(t["id"], "validation")
        expect(train and train[-1][0] == MNIST_EPOCH_BATCHES, f"training loss {train}")
        expect(val and val[-1][0] == MNIST_EPOCH_BATCHES and {"validation_loss", "accuracy"} <= set(val[-1][1]),
               f"validations {val}")
    check("mnist_pytorch: PyTorchTrial (Trainer, --epochs 1) on 1 slot", mnist_one)

    def mnist_checkpoint() -> None:
        _, trials = done("m1")
        kept = [c for c in stored(trials[0]["id"]) if c["state"] == "STATE_COMPLETED"]
        expect(kept, "no completed checkpoint")
        target = out_dir / "mnist-ckpt"
        det("checkpoint", "download", kept[-1]["uuid"], "--output-dir", str(target), "--mode", "master")
        expect((target / "state_dict.pth").is_file() and (target / "load_data.json").is_file(),
               f"downloaded {sorted(p.name for p in target.iterdir())}")
    check("mnist_pytorch: its checkpoint (Trainer layout) downloads through the master", mnist_checkpoint)

    def mnist_two() -> None:
        _, trials = done("m2")
        t = trials[0]
        expect(int(t["totalBatchesProcessed"]) == MNIST_EPOCH_BATCHES, f"batches {t['totalBatchesProcessed']}")
        val = master.metrics(t["id"], "validation")
        expect(val and "validation_loss" in val[-1][1], f"validations {val}")
        for rank in (0, 1):
            expect(logs(t["id"], "--rank-id", str(rank)).strip(), f"no log lines of rank {rank}")
    check("mnist_pytorch: PyTorchTrial on 2 slots (determined.launch.torch_distributed)", mnist_two)

    def warm_start() -> None:
        _, trials = done("warm")
        t = trials[0]
        expect(t.get("warmStartCheckpointUuid") == notes.get("s2_kept"),
               f"warmStartCheckpointUuid {t.get('warmStartCheckpointUuid')}")
        out = logs(t["id"])
        expect("x is now 101\n" in out and "x is now 1\n" not in out, one_line(out[-300:]))
        expect(series(t["id"], "validation", "x") == [(100, 200)], f"validation {series(t['id'], 'validation', 'x')}")
    check("core_api 2_checkpoints: warm start from another trial's checkpoint", warm_start)


# --- main ---


def print_report(board: Scoreboard, groups: list[str]) -> None:
    width = max((len(r.name) for r in board.results), default=10)
    print(f"\n{'group':8} {'check':{width}}  result  why")
    print(f"{'-' * 8} {'-' * width}  ------  {'-' * 40}")
    for r in board.results:
        print(f"{r.group:8} {r.name:{width}}  {'PASS' if r.ok else 'FAIL'}    {r.reason}")
    failed = [r for r in board.results if not r.ok]
    if failed:
        print("\nFailures, with the last command each ran and its output:")
        for r in failed:
            print(f"\n### [{r.group}] {r.name}: {r.reason}")
            if r.detail:
                print(textwrap.indent(r.detail.rstrip(), "    "))
    print()
    for g in groups:
        mine = [r for r in board.results if r.group == g]
        if len(mine) != EXPECTED[g]:
            print(f"note: {g} ran {len(mine)} checks, not the {EXPECTED[g]} it defines")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["cli", "sdk", "harness"], action="append",
                    help="run only this group (repeatable; default: all three)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                    help="the determined==0.38.1 venv (its bin/det and bin/python; offered to tasks as "
                         f"{ENVIRONMENT})")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--slots-per-agent", type=int, default=2)
    ap.add_argument("--extra", action="store_true",
                    help="with cli: also probe 0.38.1 commands left out of the 94 (printed, not scored)")
    ap.add_argument("--no-preemption", action="store_true",
                    help="give the default pool `scheduler: {type: priority, preemption: false}` (Determined's "
                         "default) instead of the master's own default")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, downloads, logs)")
    ap.add_argument("--quiet", action="store_true", help="no line per check as it runs, only the table")
    args = ap.parse_args()
    groups = args.only or ["cli", "sdk", "harness"]
    venv = args.venv.resolve()
    if not (venv / "bin" / "det").exists():
        sys.exit(f"no determined venv at {venv} (tests/support/determined_venv.py builds it)")

    board = Scoreboard(verbose=not args.quiet)
    work = Path(tempfile.mkdtemp(prefix="det-client-score-"))
    started = time.monotonic()
    try:
        with pg_database() as db_url, local_cluster(work, db_url, venv, args.agents, args.slots_per_agent,
                                                    False if args.no_preemption else None) as url:
            print(f"cluster: {url} ({args.agents} agents x {args.slots_per_agent} slots, PostgreSQL "
                  f"{db_url.rsplit('/', 1)[1]}); work dir {work}", flush=True)
            master = Master(url)
            for group in groups:
                t0 = time.monotonic()
                print(f"\n== {group} ==", flush=True)
                if group == "cli":
                    cli = RealDet(board, venv, url, work / "cli-home")
                    found = run_cli(board, cli, master, work)
                    if args.extra:
                        run_cli_extra(board, cli, found, work)
                elif group == "sdk":
                    run_sdk(board, venv, url, work)
                else:
                    run_harness(board, RealDet(board, venv, url, work / "harness-home"), master, work)
                print(f"== {group}: {time.monotonic() - t0:.0f} s", flush=True)
            if args.keep:
                shutil.copytree(work / "cluster" / "logs", work / "cluster-logs", dirs_exist_ok=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_report(board, groups)
    print(f"wall time {time.monotonic() - started:.0f} s")
    figures = []
    for g in ["cli", "sdk", "harness"]:
        if g in groups:
            passed = sum(1 for r in board.results if r.group == g and r.ok)
            figures.append(f"{g}_passed={passed}/{EXPECTED[g]}")
    extra = [r for r in board.results if r.group == "cli-extra"]
    if extra:
        figures.append(f"cli_extra_passed={sum(r.ok for r in extra)}/{len(extra)}")
    print(" ".join(figures))


if __name__ == "__main__":
    main()
