"""What a TensorBoard task runs: its experiments' metrics as TensorBoard event files, served by TensorBoard.

``python3 -m controlplane.exec.tensorboard_task --path-prefix /proxy/<id>``: reads the task's
experiments' reports from the master (``GET /api/v1/tasks/<task>/tensorboard/scalars`` with the
task's own token, paged by report id), writes them as scalars (``<group>/<metric>`` at
``steps_completed``) into one event directory per trial (``experiment_<id>/trial_<id>``), starts
TensorBoard on the task's ``http`` port under the master's proxy path, and keeps reading new
reports every few seconds while the experiments run. Needs ``tensorboard`` in the task environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

POLL_S = 5.0
PAGE = 5000


class Scalars:
    """Event writers per trial; each report becomes one scalar per numeric metric."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer_class = EventFileWriter
        self.logdir = logdir
        self.writers: dict[tuple[int, int], Any] = {}

    def add(self, report: dict[str, Any]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        key = (int(report["experimentId"]), int(report["trialId"]))
        writer = self.writers.get(key)
        if writer is None:
            path = self.logdir / f"experiment_{key[0]}" / f"trial_{key[1]}"
            path.mkdir(parents=True, exist_ok=True)
            writer = self.writers[key] = self._writer_class(str(path))
        values = [summary_pb2.Summary.Value(tag=f"{report['group']}/{name}", simple_value=value)
                  for name, value in sorted(report["metrics"].items())]
        if values:
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(report["stepsCompleted"]),
                                             summary=summary_pb2.Summary(value=values)))

    def flush(self) -> None:
        for writer in self.writers.values():
            writer.flush()


def fetch(after: int) -> tuple[list[dict[str, Any]], int]:
    master = os.environ["DET_MASTER"].rstrip("/")
    url = f"{master}/api/v1/tasks/{os.environ['DET_TASK_ID']}/tensorboard/scalars?after={after}&limit={PAGE}"
    request = urllib.request.Request(url, headers={
        "Grpc-Metadata-X-Allocation-Token": f"Bearer {os.environ['DET_SESSION_TOKEN']}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        body = json.loads(answer.read())
    return body["scalars"], int(body["nextAfter"])


def sync(scalars: Scalars, after: int) -> int:
    """Every report after ``after``; the last id read."""
    while True:
        page, after = fetch(after)
        for report in page:
            scalars.add(report)
        scalars.flush()
        if len(page) < PAGE:
            return after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorboard_task")
    parser.add_argument("--path-prefix", default="", help="where the master's proxy serves it")
    parser.add_argument("--logdir", default="tensorboard")
    args = parser.parse_args(argv)
    port = os.environ.get("PAI_CONTAINER_HOST_http_PORT_LIST", "").split(",")[0]
    if not port.isdigit():
        print("tensorboard_task: the task has no http port (PAI_CONTAINER_HOST_http_PORT_LIST)", file=sys.stderr)
        return 2
    logdir = Path(args.logdir).resolve()
    scalars = Scalars(logdir)
    after = sync(scalars, 0)
    board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "0.0.0.0",
                              "--port", port, "--path_prefix", args.path_prefix.rstrip("/"), "--reload_interval", "5"])
    print(f"TensorBoard over {len(scalars.writers)} trial(s) on port {port}", flush=True)
    try:
        while board.poll() is None:
            time.sleep(POLL_S)
            try:
                after = sync(scalars, after)
            except OSError as e:  # the master restarting: try again at the next poll
                print(f"tensorboard_task: reading metrics failed ({e}); retrying", file=sys.stderr, flush=True)
    finally:
        if board.poll() is None:
            board.terminate()
    return board.wait()


if __name__ == "__main__":
    sys.exit(main())
