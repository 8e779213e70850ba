"""`det pai`: OpenPAI jobs (submit, list, describe, logs, stop, config, ssh, output) on the master's OpenPAI routes.

The job JSON is OpenPAI's v1 protocol (``controlplane.pai.spec``). `submit` checks it here first,
every mistake named by field path and rule, so nothing is sent that the master would refuse for
its shape. A job with ``codeDir`` has that directory (relative to the JSON file's own directory)
packed exactly like `det experiment create` packs a context (``.detignore``, symlinks, the size
limit) and sent with the job to ``POST /api/v1/pai/jobs``; a job without one is posted as it is to
OpenPAI's own ``POST /api/v1/user/{me}/jobs``. The other commands address a job as OpenPAI does,
by its owner and name: ``/api/v1/user/{user}/jobs/{jobName}`` (``--user``: another user's job;
default: the signed-in user's). Times on these routes are epoch milliseconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from controlplane.cli import context as ctx
from controlplane.cli import pages, render, ssh_keys
from controlplane.cli.common import print_json, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.progress import ProgressBody
from controlplane.cli.session import UPLOAD_TIMEOUT, Session

if TYPE_CHECKING:
    from controlplane.pai.spec import PaiJob

FINAL_STATES = {"SUCCEEDED", "FAILED", "STOPPED"}
CODE_DIR_LIMIT = 200 * 1024 * 1024  # OpenPAI's limit on codeDir (a context's is 95 MiB)
LIST_PAGE = 1000  # the master's largest list page
LOG_PAGE = 1000
FOLLOW_POLL_S = 1.0
MAX_JOB_FILE = 16 * 1024 * 1024  # the protocol caps the job at 1 MiB; spare room for indentation


# ---- paths and values -----------------------------------------------------------------------
def user_jobs_path(username: str) -> str:
    return f"/api/v1/user/{quote(username, safe='')}/jobs"


def job_path(username: str, name: str) -> str:
    return f"{user_jobs_path(username)}/{quote(name, safe='')}"


def owner(session: Session, args: argparse.Namespace) -> str:
    """``--user``, else the signed-in user."""
    return args.job_user if getattr(args, "job_user", None) else session.current_username()


def format_ms(value: Any) -> str:
    """Epoch milliseconds -> render.format_time's text; empty when absent."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    try:
        moment = datetime.fromtimestamp(value / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return str(value)
    return render.format_time(moment.isoformat())


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def job_name(text: str) -> str:
    """argparse type for JOB: OpenPAI's jobName rule, so `det pai describe a/b` is a usage error."""
    from controlplane.pai.spec import JOB_NAME_RE, MAX_NAME

    if not JOB_NAME_RE.fullmatch(text) or len(text) > MAX_NAME:
        raise argparse.ArgumentTypeError(f"expected a job name (at most {MAX_NAME} letters, digits and -._~), "
                                         f"got {text!r}")
    return text


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


# ---- submit ---------------------------------------------------------------------------------
def read_job_file(path: Path) -> dict[str, Any]:
    """The job JSON as an object; every way the file can be wrong names the file."""
    try:
        size = path.stat().st_size
        if size > MAX_JOB_FILE:
            raise CliError(f"job file {path} is {render.format_size(size)}, over the "
                           f"{render.format_size(MAX_JOB_FILE)} a job file may be")
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read job file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"job file {path} is not UTF-8 text") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"job file {path} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise CliError(f"job file {path} is nested too deeply") from None
    if not isinstance(raw, dict):
        raise CliError(f"job file {path} must hold a JSON object (OpenPAI's job protocol), "
                       f"got {type(raw).__name__ if raw is not None else 'null'}")
    return raw


def check_job(path: Path, raw: dict[str, Any]) -> PaiJob:
    """The parsed job, or CliError listing every mistake the protocol's rules find."""
    from controlplane.pai.spec import PaiJobError, parse_job

    try:
        job, _ = parse_job(raw)  # the master sends its own warnings back
    except PaiJobError as e:
        lines = "\n".join(f"  {err}" for err in e.errors)
        raise CliError(f"invalid job {path} ({len(e.errors)} error{'s' if len(e.errors) != 1 else ''}):\n{lines}") \
            from None
    return job


def code_dir_of(path: Path, code_dir: str) -> Path:
    """``codeDir`` relative to the job file's directory (an absolute path stays as it is)."""
    where = path.parent / code_dir
    if not where.is_dir():
        what = "does not exist" if not where.exists() else "is not a directory"
        raise CliError(f"codeDir: {where} {what} (codeDir {code_dir!r} is read relative to {path}'s directory)")
    return where


def cmd_submit(args: argparse.Namespace) -> int:
    path = Path(args.job_file)
    raw = read_job_file(path)
    job = check_job(path, raw)
    session = session_for(args)
    if job.code_dir:
        files = ctx.collect(code_dir_of(path, job.code_dir), limit=CODE_DIR_LIMIT)
        session.ensure_token()  # log in before the upload, not after a 401 on a big body
        body = ProgressBody(json.dumps({"job": raw, "codeFiles": files}).encode(), label="uploading codeDir")
        answer = session.post("/api/v1/pai/jobs", data=body, timeout=UPLOAD_TIMEOUT)
    else:
        answer = session.post(user_jobs_path(session.current_username()), raw)
    answer = answer if isinstance(answer, dict) else {}
    for warning in answer.get("warnings") or []:
        print(f"Warning: {warning}", file=sys.stderr)
    if args.json:
        print_json(answer)
    else:
        print(f"Submitted job {job.job_name}")
    return 0


# ---- list -----------------------------------------------------------------------------------
def list_jobs(session: Session, path: str, params: dict[str, Any], offset: int,
              limit: int | None) -> list[dict[str, Any]]:
    """Pages of at most LIST_PAGE from ``offset`` until ``limit`` rows (None: all) or a short page."""
    jobs: list[dict[str, Any]] = []
    while limit is None or len(jobs) < limit:
        want = LIST_PAGE if limit is None else min(LIST_PAGE, limit - len(jobs))
        page = session.get(path, {**params, "offset": offset, "limit": want})
        if not isinstance(page, list):
            raise CliError(f"the master answered {path} with {type(page).__name__}, not a list of jobs")
        jobs.extend(j for j in page if isinstance(j, dict))
        if len(page) < want:
            break
        offset += len(page)
    return jobs


def cmd_list(args: argparse.Namespace) -> int:
    session = session_for(args)
    if args.all:
        path = "/api/v1/jobs"
    else:
        path = user_jobs_path(owner(session, args))
    jobs = list_jobs(session, path, {}, args.offset, args.limit)
    if args.json:
        print_json(jobs)
        return 0
    rows = [[j.get("name"), j.get("username"), j.get("state"), j.get("retries"), j.get("totalTaskNumber"),
             j.get("totalGpuNumber"), j.get("virtualCluster"), format_ms(j.get("createdTime"))] for j in jobs]
    print(render.table(["Name", "User", "State", "Retries", "Tasks", "GPUs", "Virtual Cluster", "Created"], rows))
    return 0


# ---- describe -------------------------------------------------------------------------------
def get_job(session: Session, username: str, name: str) -> dict[str, Any]:
    job = session.get(job_path(username, name))
    if not isinstance(job, dict) or not isinstance(job.get("jobStatus"), dict):
        raise CliError(f"the master sent no status for job {name} of user {username}")
    return job


def format_ports(ports: Any) -> str:
    if not isinstance(ports, dict):
        return ""
    return " ".join(f"{label}:{value}" for label, value in ports.items() if value not in (None, ""))


def task_rows(job: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for role, detail in (job.get("taskRoles") or {}).items():
        for task in (detail or {}).get("taskStatuses") or []:
            rows.append([role, task.get("taskIndex"), task.get("taskState"), task.get("containerIp") or "",
                         format_ports(task.get("containerPorts")), task.get("containerExitCode"),
                         task.get("containerExitDiagnostics") or ""])
    return rows


def cmd_describe(args: argparse.Namespace) -> int:
    session = session_for(args)
    job = get_job(session, owner(session, args), args.job)
    if args.json:
        print_json(job)
        return 0
    status = job["jobStatus"]
    summary = [
        ("User", status.get("username") or ""),
        ("State", status.get("state") or ""),
        *([("Waiting", status["waitingReason"])] if status.get("waitingReason") else []),
        ("Execution Type", status.get("executionType") or ""),
        ("Retries", status.get("retries")),
        ("Virtual Cluster", status.get("virtualCluster") or ""),
        ("Created", format_ms(status.get("createdTime"))),
        ("Launched", format_ms(status.get("appLaunchedTime"))),
        ("Completed", format_ms(status.get("appCompletedTime") or status.get("completedTime"))),
        ("Exit Code", "" if status.get("appExitCode") is None else status.get("appExitCode")),
        ("Exit Diagnostics", status.get("appExitDiagnostics") or ""),
    ]
    print(f"Job {job.get('name', args.job)}")
    for key, value in summary:
        print(f"  {key + ':':<18} {'' if value is None else value}".rstrip())
    print()
    print("Tasks:")
    print(render.table(["Role", "Index", "State", "IP", "Ports", "Exit Code", "Diagnostics"], task_rows(job)))
    return 0


# ---- logs -----------------------------------------------------------------------------------
def _print_line(line: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(line) + "\n")
        return
    text = line.get("log")
    text = text if isinstance(text, str) else ""
    sys.stdout.write(f"[{line.get('taskRole')}-{line.get('taskIndex')}] {text}")
    if not text.endswith("\n"):
        sys.stdout.write("\n")


def drain_logs(session: Session, path: str, params: dict[str, Any], after: int, as_json: bool) -> int:
    """Print every line after ``after``, a page at a time until a short page; the last id read."""
    return pages.drain_lines(session, path, params, after, lambda line: _print_line(line, as_json), LOG_PAGE)


def cmd_logs(args: argparse.Namespace) -> int:
    session = session_for(args)
    username = owner(session, args)
    path = f"{job_path(username, args.job)}/logs"
    params: dict[str, Any] = {}
    if args.task_role is not None:
        params["taskRole"] = args.task_role
    if args.task_index is not None:
        params["taskIndex"] = args.task_index
    after = 0
    while True:
        state = str(get_job(session, username, args.job)["jobStatus"].get("state") or "") if args.follow else ""
        after = drain_logs(session, path, params, after, args.json)
        if not args.follow:
            return 0
        if state in FINAL_STATES:  # final before this drain: every line it wrote has been read
            print(f"Job {args.job} ended: {state}", file=sys.stderr)
            return 0
        time.sleep(FOLLOW_POLL_S)


# ---- stop / config --------------------------------------------------------------------------
def cmd_stop(args: argparse.Namespace) -> int:
    session = session_for(args)
    session.put(f"{job_path(owner(session, args), args.job)}/executionType", {"value": "STOP"})
    print(f"Stopped job {args.job}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    session = session_for(args)
    print_json(session.get(f"{job_path(owner(session, args), args.job)}/config"))
    return 0


# ---- ssh ------------------------------------------------------------------------------------
def ssh_files(username: str, job: str, info: dict[str, Any]) -> tuple[Path, Path]:
    """The job's key (0600) and known-hosts, in a 0700 folder of the user's config dir."""
    folder = ssh_keys.private_folder("pai-ssh", f"{username}-{job}")
    return ssh_keys.write_key(folder, info["privateKey"]), ssh_keys.write_known_hosts(folder, info["knownHosts"])


def ssh_argv(info: dict[str, Any], task: str, key: Path, known: Path, command: list[str]) -> list[str]:
    found = next((c for c in info["containers"] if c["id"] == task), None)
    if found is None:
        running = ", ".join(c["id"] for c in info["containers"]) or "none"
        raise CliError(f"task {task} is not running (running tasks with SSH: {running})")
    return ssh_keys.ssh_argv(key, known, info["user"], found["sshIp"], found["sshPort"], command)


def cmd_ssh(args: argparse.Namespace) -> int:
    session = session_for(args)
    username = owner(session, args)
    info = session.get(f"{job_path(username, args.job)}/ssh")
    key, known = ssh_files(username, args.job, info)
    argv = ssh_argv(info, args.task, key, known, ssh_keys.remote_command(args.remote_command))
    ssh_keys.exec_ssh(argv)


# ---- parser ---------------------------------------------------------------------------------
def _add_job(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", type=job_name, help="the job's name (its jobName)")
    p.add_argument("--user", dest="job_user", metavar="USER", help="the job's owner (default: you)")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("pai", help="OpenPAI jobs (OpenPAI's job JSON and REST routes)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("submit", help="check a job JSON here, then submit it (uploading its codeDir)")
    p.add_argument("job_file", metavar="JOB.json", help="the job, in OpenPAI's job protocol")
    p.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("list", aliases=["ls"], help="list your jobs (or a user's, or everyone's), newest first")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", dest="job_user", metavar="USER", help="this user's jobs (default: yours)")
    who.add_argument("--all", "-a", action="store_true", help="every user's jobs")
    p.add_argument("--limit", type=_positive, metavar="N", help="at most N jobs (default: all)")
    p.add_argument("--offset", type=_non_negative, default=0, metavar="N", help="skip the N newest jobs")
    p.add_argument("--json", action="store_true", help="print the job summaries as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="a job's status and each task's state, address and ports")
    _add_job(p)
    p.add_argument("--json", action="store_true", help="print the job as JSON")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("logs", help="a job's task logs, each line prefixed [role-index]")
    _add_job(p)
    p.add_argument("--task-role", metavar="ROLE", help="only this task role's lines")
    p.add_argument("--task-index", type=_non_negative, metavar="I", help="only the lines of tasks with this index")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")
    p.add_argument("--json", action="store_true", help="one JSON object per line (id, taskRole, taskIndex, log...)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("stop", help="stop a job (its owner or an admin)")
    _add_job(p)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("ssh", help="ssh into a running task of your job: det pai ssh JOB worker-0 [COMMAND...]")
    _add_job(p)
    p.add_argument("task", metavar="TASK", help="<role>-<index>, e.g. worker-0")
    p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="run this instead of a shell")
    p.set_defaults(func=cmd_ssh)

    p = sub.add_parser("config", help="print the job JSON as submitted (its owner or an admin)")
    _add_job(p)
    p.set_defaults(func=cmd_config)

    from controlplane.cli import pai_output

    pai_output.add_parser(sub, _add_job, job_path, owner)
