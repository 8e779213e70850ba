"""What a TensorBoard task runs: its experiments' metrics as TensorBoard event files, served by TensorBoard.

``python3 -m controlplane.exec.tensorboard_task --path-prefix /proxy/<id>``: reads the task's
experiments' reports from the master (``GET /api/v1/tasks/<task>/tensorboard/scalars`` with the
task's own token, paged by report id), writes them as scalars (``<group>/<metric>`` at
``steps_completed``) into one event directory per trial (``experiment_<id>/trial_<id>``), starts
TensorBoard on the task's ``http`` port under the master's proxy path, and keeps reading new
reports every few seconds while the experiments run. Needs ``tensorboard`` in the task environment.

TensorBoard listens on the task's own address (``PAI_CONTAINER_HOST_IP``: the agent's, loopback
on a local cluster), where the master's proxy reaches it, and answers only requests that carry
the task's secret (``DET_TASK_PROXY_SECRET``, which the proxy adds as ``Authorization: token
<secret>``): its WSGI app is wrapped by ``RequireSecret``, so another task or a host on the
network gets 403.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

POLL_S = 5.0
PAGE = 5000
SECRET_ENV = "DET_TASK_PROXY_SECRET"  # services.task_proxy.SECRET_ENV (a task does not import the master)


class RequireSecret:
    """WSGI middleware: 403 unless the request carries ``Authorization: token <secret>``."""

    def __init__(self, app: Callable[..., Iterable[bytes]], secret: str) -> None:
        if not secret:
            raise ValueError("the task proxy's secret is empty")
        self.app, self.expected = app, f"token {secret}".encode()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        sent = str(environ.get("HTTP_AUTHORIZATION", "")).encode("latin-1", "replace")
        if not hmac.compare_digest(sent, self.expected):
            body = b"403: this TensorBoard answers only through the master's proxy\n"
            start_response("403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        return self.app(environ, start_response)


def serve(logdir: str, host: str, port: str, path_prefix: str) -> None:
    """TensorBoard on ``host:port``, behind ``RequireSecret`` (runs until killed)."""
    from tensorboard import default, program

    secret = os.environ.get(SECRET_ENV, "")
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=lambda app, flags: program.WerkzeugServer(
        RequireSecret(app, secret), flags))
    board.configure(argv=[sys.argv[0], "--logdir", logdir, "--host", host, "--port", port,
                          "--path_prefix", path_prefix, "--reload_interval", "5",
                          "--load_fast", "false"])  # no data server of its own on another port
    board.main()


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
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child: TensorBoard itself
    args = parser.parse_args(argv)
    if not os.environ.get(SECRET_ENV):
        print(f"tensorboard_task: the task has no proxy secret ({SECRET_ENV})", file=sys.stderr)
        return 2
    port = os.environ.get("PAI_CONTAINER_HOST_http_PORT_LIST", "").split(",")[0]
    if not port.isdigit():
        print("tensorboard_task: the task has no http port (PAI_CONTAINER_HOST_http_PORT_LIST)", file=sys.stderr)
        return 2
    host = os.environ.get("PAI_CONTAINER_HOST_IP") or "127.0.0.1"
    if args.serve:
        serve(args.logdir, host, port, args.path_prefix.rstrip("/"))
        return 0
    logdir = Path(args.logdir).resolve()
    scalars = Scalars(logdir)
    after = sync(scalars, 0)
    board = subprocess.Popen([sys.executable, "-m", "controlplane.exec.tensorboard_task", "--serve",
                              "--logdir", str(logdir), "--path-prefix", args.path_prefix])
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
