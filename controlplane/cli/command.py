"""`det command` (alias `det cmd`): run a command on the cluster; and what `det shell` and
`det notebook` share with it (launch, list, describe, logs, kill).

Paths and shapes are Determined 0.38.1's: ``POST /api/v1/{commands,shells,notebooks}`` with
``{"config": {...}, "files": [v1File...]}`` launches one and answers ``{"command"|"shell"|"notebook":
{...}}``; ``GET`` lists them (``pagination``) or gets one by id; ``POST .../{id}/kill`` stops one (its
owner or an admin); ``GET .../{id}/logs?after=N&limit=M`` pages its lines by line id (``nextAfter``).
States: STATE_QUEUED, STATE_STARTING, STATE_RUNNING, STATE_TERMINATED, with ``exitCode`` once
terminated.

The config is Determined's command config: ``--config-file`` (YAML), then ``--config key=value``
overrides read as Determined's `det cmd` reads them (a value with commas is a list, one starting
with ``[`` or ``{`` is YAML); the master checks it and names a wrong field. ``-c/--context`` packs a
directory exactly as `det experiment create` packs its context (``.detignore``, links, the size
limit); the task starts in its copy. An id may be given as a unique prefix, as in Determined.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from controlplane.cli import context as ctx
from controlplane.cli import pages, render
from controlplane.cli.common import paged, print_json, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.progress import ProgressBody
from controlplane.cli.session import UPLOAD_TIMEOUT, Session

QUEUED, STARTING, RUNNING, TERMINATED = "STATE_QUEUED", "STATE_STARTING", "STATE_RUNNING", "STATE_TERMINATED"
ID_RE = re.compile(r"^[0-9a-fA-F-]{1,64}$")  # the master's rule for the path parameter
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
LOG_PAGE = 1000  # the master's largest log page
POLL_S = 1.0
MAX_CONFIG_FILE = 1024 * 1024

CONFIG_HELP = ("override a config field, e.g. resources.slots=2 (repeatable); a value with commas is a list, "
               "one starting with [ or { is read as YAML")
CONTEXT_HELP = ("a directory whose contents are copied into the task's working directory (.detignore is "
                "honored; at most 95 MiB)")


def title(kind: str) -> str:
    return kind.capitalize()


def kind_path(kind: str, task_id: str | None = None, *rest: str) -> str:
    path = f"/api/v1/{kind}s"
    return "/".join([path, task_id, *rest]) if task_id else path


# ---- config ---------------------------------------------------------------------------------
def read_config(config_file: str | None, overrides: list[str]) -> dict[str, Any]:
    """``--config-file`` (YAML; none: an empty config) with ``--config`` overrides applied."""
    from controlplane.config.errors import ConfigError
    from controlplane.config.yaml_io import load_yaml

    config: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            if path.stat().st_size > MAX_CONFIG_FILE:
                raise CliError(f"config file {path} is over {render.format_size(MAX_CONFIG_FILE)}")
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot read config file {path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise CliError(f"config file {path} is not UTF-8 text") from None
        try:
            config = load_yaml(text, str(path))
        except ConfigError as e:
            raise CliError(f"invalid config: {e}") from None
    try:
        return apply_overrides(config, overrides)
    except ConfigError as e:
        raise CliError(f"invalid config: {e}") from None


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Determined's `det cmd --config` rule: ``key.path=value``; ``a,b`` is the list [a, b]; a value
    starting with ``[`` or ``{`` is YAML as a whole; else one YAML scalar. Raises ConfigError."""
    from controlplane.config.errors import ConfigError
    from controlplane.config.yaml_io import apply_overrides as set_yaml
    from controlplane.config.yaml_io import load_value

    for item in overrides:
        key, sep, raw = item.partition("=")
        if sep and "," in raw and not raw.startswith(("[", "{")):
            config = set_yaml(config, [f"{key}=[]"])  # the path, checked as for any override
            node = config
            *parents, last = key.split(".")
            for part in parents:
                node = node[part]
            node[last] = [load_value(piece, key) for piece in raw.split(",")]
        else:
            config = set_yaml(config, [item])
    if not isinstance(config, dict):  # pragma: no cover - load_yaml and set_yaml keep a mapping
        raise ConfigError("", "the config must be a mapping")
    return config


# ---- ids and answers ------------------------------------------------------------------------
def id_arg(text: str) -> str:
    """argparse type for an id or a prefix of one, so `det cmd kill x/y` is a usage error."""
    if not ID_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected an id (hexadecimal digits and dashes), got {text!r}")
    return text.lower()


def list_all(session: Session, kind: str) -> list[dict[str, Any]]:
    return [item for item in paged(session, kind_path(kind), f"{kind}s") if isinstance(item, dict)]


def resolve_id(session: Session, kind: str, text: str) -> str:
    """A whole id as it is; a prefix: the one id it starts (Determined's partial UUIDs)."""
    if UUID_RE.fullmatch(text):
        return text
    found = [str(item.get("id")) for item in list_all(session, kind) if str(item.get("id", "")).startswith(text)]
    if not found:
        raise CliError(f"no {kind} has an id starting with {text!r}")
    if len(found) > 1:
        raise CliError(f"{len(found)} {kind}s have an id starting with {text!r}: {', '.join(sorted(found))}")
    return found[0]


def unwrap(kind: str, answer: Any, what: str) -> dict[str, Any]:
    task = answer.get(kind) if isinstance(answer, dict) else None
    if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not task["id"]:
        raise CliError(f"the master answered {what} without the {kind}")
    return task


def get_task(session: Session, kind: str, task_id: str) -> dict[str, Any]:
    return unwrap(kind, session.get(kind_path(kind, task_id)), f"GET {kind_path(kind, task_id)}")


# ---- launch ---------------------------------------------------------------------------------
def launch(session: Session, kind: str, config: dict[str, Any], context_dir: str | None,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send the config and the packed context (and ``extra`` fields, a TensorBoard's experimentIds);
    the new command, shell, notebook or TensorBoard."""
    files = ctx.collect(Path(context_dir)) if context_dir else []
    session.ensure_token()  # log in before the upload, not after a 401 on a big body
    body = ProgressBody(json.dumps({"config": config, "files": files, **(extra or {})}).encode())
    answer = session.post(kind_path(kind), data=body, timeout=UPLOAD_TIMEOUT)
    task = unwrap(kind, answer, f"the launch of a {kind}")
    for warning in answer.get("warnings") or []:
        if warning == "LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED":
            warning = f"the {kind} asks for more slots than the cluster has now"
        print(f"Warning: {warning}", file=sys.stderr)
    return task


def add_launch_flags(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("--config-file", metavar="FILE", help=f"{kind} config (YAML), Determined's command config")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help=CONFIG_HELP)
    p.add_argument("-c", "--context", metavar="DIR", help=CONTEXT_HELP)
    p.add_argument("-d", "--detach", action="store_true", help="print the id and return; do not wait")
    p.add_argument("--description", metavar="TEXT", help=f"the {kind}'s description (config: description)")


def launch_config(args: argparse.Namespace) -> dict[str, Any]:
    config = read_config(args.config_file, args.config)
    if args.description is not None:
        config["description"] = args.description
    return config


def wait_running(session: Session, kind: str, task_id: str, interval: float = POLL_S) -> dict[str, Any]:
    """Poll until the task runs, each new state on stderr; CliError if it ends first."""
    last = None
    while True:
        task = get_task(session, kind, task_id)
        state = str(task.get("state") or "")
        if state != last:
            print(f"{title(kind)} {task_id}: {render.format_state(state)}", file=sys.stderr, flush=True)
            last = state
        if state == RUNNING:
            return task
        if state == TERMINATED:
            why = task.get("exitStatus") or (f"exit code {task['exitCode']}" if task.get("exitCode") is not None
                                             else "no reason given")
            raise CliError(f"{kind} {task_id} ended before it was running: {why}")
        time.sleep(interval)


# ---- list / describe ------------------------------------------------------------------------
def row(task: dict[str, Any]) -> list[Any]:
    return [task.get("id"), task.get("description") or "", task.get("username") or "",
            render.format_state(task.get("state")), task.get("exitCode"), render.format_time(task.get("startTime"))]


HEADERS = ["ID", "Description", "User", "State", "Exit Code", "Start Time"]


def cmd_list(args: argparse.Namespace) -> int:
    session = session_for(args)
    tasks = list_all(session, args.kind)
    if not args.all:
        me = session.current_username()
        tasks = [t for t in tasks if t.get("username") == me]
    if args.json:
        print_json(tasks)
    elif args.quiet:
        for t in tasks:
            print(t.get("id"))
    else:
        print(render.table(HEADERS, [row(t) for t in tasks]))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    session = session_for(args)
    task = get_task(session, args.kind, resolve_id(session, args.kind, args.id))
    if args.json:
        print_json(task)
    else:
        print(render.table(HEADERS, [row(task)]))
    return 0


# ---- kill -----------------------------------------------------------------------------------
def cmd_kill(args: argparse.Namespace) -> int:
    session = session_for(args)
    ids = [resolve_id(session, args.kind, text) for text in args.ids]
    for i, task_id in enumerate(ids):
        try:
            session.post(kind_path(args.kind, task_id, "kill"))
        except CliError as e:
            if not args.force:
                for skipped in ids[i + 1:]:
                    print(f"Not killing {args.kind} {skipped}", file=sys.stderr)
                raise
            print(f"Skipping {args.kind} {task_id}: {e.message}", file=sys.stderr)
            continue
        print(f"Killed {args.kind} {task_id}")
    return 0


# ---- logs -----------------------------------------------------------------------------------
def _write_line(line: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(line) + "\n")
        return
    text = line.get("log")
    sys.stdout.write(text if isinstance(text, str) else "")


def drain_logs(session: Session, kind: str, task_id: str, after: int, as_json: bool = False) -> int:
    """Print every line after line id ``after``, a page at a time; the last id read."""
    return pages.drain_lines(session, kind_path(kind, task_id, "logs"), {}, after,
                             lambda line: _write_line(line, as_json), LOG_PAGE)


def follow_logs(session: Session, kind: str, task_id: str, as_json: bool = False,
                interval: float = POLL_S) -> dict[str, Any]:
    """Print lines as they come until the task has ended and every line it wrote is printed;
    the task as it ended."""
    after = 0
    while True:
        task = get_task(session, kind, task_id)  # read before the drain: a final state means all lines are in
        after = drain_logs(session, kind, task_id, after, as_json)
        if task.get("state") == TERMINATED:
            return task
        time.sleep(interval)


def ended(kind: str, task: dict[str, Any]) -> str:
    """``Command <id> ended: exit code N``; without one, why it ended, as the master says."""
    code = task.get("exitCode")
    if code is not None:
        return f"{title(kind)} {task.get('id')} ended: exit code {code}"
    why = f" ({task['exitStatus']})" if task.get("exitStatus") else ""
    return f"{title(kind)} {task.get('id')} ended: no exit code{why}"


def cmd_logs(args: argparse.Namespace) -> int:
    session = session_for(args)
    task_id = resolve_id(session, args.kind, args.id)
    if not args.follow:
        get_task(session, args.kind, task_id)  # a missing one says so before anything else
        drain_logs(session, args.kind, task_id, 0, args.json)
        return 0
    print(ended(args.kind, follow_logs(session, args.kind, task_id, args.json)), file=sys.stderr)
    return 0


# ---- run ------------------------------------------------------------------------------------
def exit_status(task: dict[str, Any]) -> int:
    """The command's own exit code as this process's status; 1 when it has none (killed before it
    ran) or one no process status can carry."""
    code = task.get("exitCode")
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        return code
    return 1


def cmd_run(args: argparse.Namespace) -> int:
    entrypoint = list(args.entrypoint)
    if entrypoint[:1] == ["--"]:
        entrypoint = entrypoint[1:]
    config = launch_config(args)
    if entrypoint and not config.get("entrypoint"):
        config["entrypoint"] = entrypoint
    elif entrypoint:  # Determined's rule: the config's entrypoint wins
        print(f"Warning: the config's entrypoint runs; {shlex.join(entrypoint)!r} on the command line is ignored",
              file=sys.stderr)
    if not config.get("entrypoint"):
        raise CliError("no command to run: det cmd run [flags] COMMAND [ARG...] (or entrypoint in --config-file)")
    session = session_for(args)
    task = launch(session, "command", config, args.context)
    if args.detach:
        print(task["id"])
        return 0
    print(f"Launched command (id: {task['id']})", file=sys.stderr, flush=True)
    try:
        final = follow_logs(session, "command", task["id"])
    except KeyboardInterrupt:
        print(f"\nThe command goes on: det cmd logs -f {task['id']} to follow it, det cmd kill {task['id']} "
              "to stop it", file=sys.stderr)
        raise
    print(ended("command", final), file=sys.stderr)
    return exit_status(final)


# ---- parser ---------------------------------------------------------------------------------
def add_common(sub: argparse._SubParsersAction[Any], kind: str) -> None:
    """list, describe, logs and kill, alike for commands, shells and notebooks."""
    plural = f"{kind}s"
    p = sub.add_parser("list", aliases=["ls"], help=f"list your {plural} (--all: everyone's), newest first")
    p.add_argument("--all", "-a", action="store_true", help=f"every user's {plural}")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-q", "--quiet", action="store_true", help="only the ids")
    out.add_argument("--json", action="store_true", help=f"the {plural} as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help=f"one {kind}'s state, owner and exit code")
    p.add_argument("id", metavar="ID", type=id_arg, help=f"the {kind}'s id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help=f"the {kind} as JSON")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("logs", help=f"the {kind}'s output")
    p.add_argument("id", metavar="ID", type=id_arg, help=f"the {kind}'s id (or a unique prefix)")
    p.add_argument("-f", "--follow", action="store_true", help=f"keep printing new lines until the {kind} ends")
    p.add_argument("--json", action="store_true", help="one JSON object per line (id, timestamp, stdtype, log...)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("kill", help=f"stop {plural} (their owner or an admin)")
    p.add_argument("ids", metavar="ID", nargs="+", type=id_arg, help=f"the {kind}'s id (or a unique prefix)")
    p.add_argument("-f", "--force", action="store_true", help="go on past an id that cannot be killed")
    p.set_defaults(func=cmd_kill)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("command", aliases=["cmd"], help="run commands on the cluster")
    parser.set_defaults(kind="command")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="run a command; print its output and exit with its exit code (-d: in the "
                                   "background)")
    add_launch_flags(p, "command")
    p.add_argument("entrypoint", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the command and its arguments (after the flags)")
    p.set_defaults(func=cmd_run)

    add_common(sub, "command")


# ---- tasks served through the master's proxy (notebooks, TensorBoards) ----------------------
SERVING_WAIT_S = 300.0  # the served program's own start, after the task runs


def service_url(session: Session, kind: str, task: dict[str, Any]) -> str:
    """The master's URL of a notebook's or TensorBoard's ``serviceAddress``."""
    address = task.get("serviceAddress")
    if not isinstance(address, str) or not address.startswith("/"):
        raise CliError(f"the master sent no service address for {kind} {task.get('id')}")
    return session.master.rstrip("/") + address


def wait_serving(session: Session, kind: str, task_id: str, timeout_s: float = SERVING_WAIT_S,
                 interval: float = POLL_S) -> bool:
    """True once the master says the task's web server answers (Determined's ``isReady``: the
    master asks it, at the address and with the secret its proxy uses); False after ``timeout_s``;
    CliError if the task ends or the master refuses this user. The printed URL is the master's
    link, which sends a browser on to the task's own origin (``<task>.<proxy host>``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = session.get(f"/api/v1/tasks/{task_id}")
        allocations = (answer.get("task") or {}).get("allocations") or []
        if any(a.get("isReady") for a in allocations if isinstance(a, dict)):
            return True
        task = get_task(session, kind, task_id)
        if task.get("state") == TERMINATED:
            raise CliError(f"{kind} {task_id} ended before it answered: {task.get('exitStatus') or 'no reason given'}")
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def start_served(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> int:
    """Launch, wait until it runs and answers through the master, print its URL (-d: its id)."""
    session = session_for(args)
    task = launch(session, args.kind, launch_config(args), args.context, extra)
    if args.detach:
        print(task["id"])
        return 0
    try:
        task = wait_running(session, args.kind, task["id"])
        if not wait_serving(session, args.kind, task["id"]):
            print(f"Warning: the {args.kind} does not answer through the master yet; see det {args.kind} logs "
                  f"{task['id']}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nThe {args.kind} goes on: det {args.kind} open {task['id']} for its URL, det {args.kind} kill "
              f"{task['id']} to stop it", file=sys.stderr)
        raise
    print(f"{title(args.kind)} is running at:", file=sys.stderr)
    print(service_url(session, args.kind, task))
    return 0


def cmd_open_served(args: argparse.Namespace) -> int:
    session = session_for(args)
    task = get_task(session, args.kind, resolve_id(session, args.kind, args.id))
    if task.get("state") != RUNNING:
        raise CliError(f"{args.kind} {task['id']} is not running "
                       f"({render.format_state(task.get('state')) or 'no state'})")
    print(service_url(session, args.kind, task))
    return 0
