"""Determined's `det deploy local` verbs, run on this project's local cluster of processes.

Determined runs a local cluster as Docker containers named after `--cluster-name`; here the same
verbs act on the data dir `up` and `down` use (`--cluster-name determined`, Determined's default, is
`.det-local`; another name is `.det-local-<name>`; `--data-dir` names one outright):

- `cluster-up`: `up` with `--agents` agents (default 1), `--master-port`, `--master-config-path`,
  `--storage-host-path` (checkpoints there), `--initial-user-password` (admin and determined), and
  `--delete-db` (start from an empty database);
- `master-up`: the same with no agents; `agent-up MASTER_HOST`: one more agent of that cluster;
- `cluster-down` (`--delete-db` also removes the database), `master-down`, `agent-down`
  (`--agent-name` or `--all`);
- `logs`: the master's log, followed unless `--no-follow`.

Options that only mean something for Docker images (`--det-version`, `--image-repo-prefix`,
`--db-password`, `--no-autorestart`, `--auto-work-dir`, `--enterprise-edition`, `--gpu/--no-gpu`)
are accepted, so Determined's scripts run, and each is said to be ignored.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from controlplane.cli import deploy, deploy_records
from controlplane.cli import deploy_procs as procs
from controlplane.cli.deploy_local_config import deep_merge, load_user_config
from controlplane.cli.errors import CliError

DEFAULT_CLUSTER_NAME = "determined"
IGNORED = ("det_version", "image_repo_prefix", "db_password", "no_autorestart", "auto_work_dir",
           "enterprise_edition", "gpu", "master_name", "agent_config_path", "agent_resource_pool")


def data_dir_of(args: argparse.Namespace) -> Path:
    if getattr(args, "data_dir", None):
        return Path(args.data_dir).expanduser().resolve()
    name = args.cluster_name
    return Path(".det-local" if name == DEFAULT_CLUSTER_NAME else f".det-local-{name}").resolve()


def _say_ignored(args: argparse.Namespace) -> None:
    given = [f"--{key.replace('_', '-')}" for key in IGNORED if getattr(args, key, None) not in (None, False)]
    if given:
        print(f"Note: {', '.join(given)} ignored: this cluster runs processes, not Docker images.", file=sys.stderr)


def _delete_db(data_dir: Path) -> None:
    record = deploy_records.read_pids(data_dir)
    if record is not None and record.ours(record.master):
        raise CliError(f"--delete-db: the master of {data_dir} is running; `det deploy local cluster-down` first")
    removed = [p for p in data_dir.glob("master.db*") if p.is_file()]
    for path in removed:
        path.unlink()
    print(f"Deleted the database in {data_dir}" if removed else f"No database in {data_dir} to delete",
          file=sys.stderr)


def _overrides(args: argparse.Namespace, data_dir: Path) -> str | None:
    """`--master-config-path` with `--storage-host-path` and `--initial-user-password` merged over it,
    written 0600 beside the cluster's own config (the password is a secret); None: no config at all."""
    extra: dict[str, Any] = {}
    if args.storage_host_path:
        extra["checkpoint_storage"] = {"type": "shared_fs",
                                       "host_path": str(Path(args.storage_host_path).expanduser().resolve())}
    if args.initial_user_password is not None:
        extra["security"] = {"initial_user_password": args.initial_user_password}
    if not extra:
        return args.master_config_path
    merged = deep_merge(load_user_config(args.master_config_path), extra)
    procs.private_dir(data_dir)
    path = data_dir / "master-overrides.yaml"
    procs.write_private(path, yaml.safe_dump(merged, sort_keys=False))
    return str(path)


def cmd_cluster_up(args: argparse.Namespace, agents: int | None = None) -> int:
    _say_ignored(args)
    data_dir = data_dir_of(args)
    if args.delete_db:
        _delete_db(data_dir)
    up = argparse.Namespace(
        data_dir=str(data_dir), port=args.master_port, agents=args.agents if agents is None else agents,
        slots_per_agent=args.slots_per_agent, master_config=_overrides(args, data_dir), autoscale=False,
        idle_period="15s", agent_environment=args.agent_environment)
    return deploy.cmd_up(up)


def cmd_master_up(args: argparse.Namespace) -> int:
    return cmd_cluster_up(args, agents=0)


def cmd_cluster_down(args: argparse.Namespace) -> int:
    data_dir = data_dir_of(args)
    code = deploy.cmd_down(argparse.Namespace(data_dir=str(data_dir)))
    if args.delete_db:
        _delete_db(data_dir)
    return code


def _recorded(data_dir: Path) -> deploy_records.Record:
    record = deploy_records.read_pids(data_dir)
    if record is None:
        raise CliError(f"no cluster recorded in {data_dir}; start one with `det deploy local master-up` "
                       "or `cluster-up` (name it with --cluster-name)")
    return record


def cmd_master_down(args: argparse.Namespace) -> int:
    data_dir = data_dir_of(args)
    record = _recorded(data_dir)
    if not record.ours(record.master):
        print(f"Master (pid {record.master}) was not running")
        return 0
    killed = deploy_records.stop_group_pids([record.master] if record.master is not None else [])
    print(f"Stopped master (pid {record.master}){' (killed)' if killed else ''}; agents left running "
          "(they reconnect when it is up again)")
    return 0


def cmd_agent_up(args: argparse.Namespace) -> int:
    _say_ignored(args)
    data_dir = data_dir_of(args)
    record = _recorded(data_dir)
    recorded = urlsplit(record.url)
    if args.master_port != recorded.port:
        raise CliError(f"the master of {data_dir} listens on port {recorded.port}, not {args.master_port}: "
                       f"`det deploy local agent-up {args.master_host} --master-port {recorded.port}`")
    if not record.ours(record.master):
        raise CliError(f"the master of {data_dir} is not running; `det deploy local master-up` first")
    i = len(record.agents)
    if args.agent_name and args.agent_name != deploy.AGENT_ID.format(i):
        print(f"Note: the agent is named {deploy.AGENT_ID.format(i)}, in this cluster's order, "
              f"not {args.agent_name}.", file=sys.stderr)
    proc = deploy._spawn_agent(data_dir, record, i)
    record.agents.append(proc.pid)
    record.note(proc.pid)
    deploy_records.write_pids(data_dir, record)
    master = record.master

    def master_failed() -> str | None:
        return None if record.ours(master) else f"the master (pid {master}) exited"

    deploy._wait_for_agents(data_dir, record.url, {i: proc}, master_failed)
    print(f"Agent {deploy.AGENT_ID.format(i)} (pid {proc.pid}) connected to {record.url}")
    return 0


def cmd_agent_down(args: argparse.Namespace) -> int:
    data_dir = data_dir_of(args)
    record = _recorded(data_dir)
    names = {deploy.AGENT_ID.format(i): pid for i, pid in enumerate(record.agents)}
    if args.all:
        chosen = list(names)
    elif args.agent_name:
        if args.agent_name not in names:
            raise CliError(f"--agent-name: no agent {args.agent_name} in {data_dir} "
                           f"(its agents: {', '.join(names) or 'none'})")
        chosen = [args.agent_name]
    else:
        raise CliError("name the agent to stop with --agent-name, or stop every one with --all")
    for name in chosen:
        pid = names[name]
        if record.ours(pid):
            killed = deploy_records.stop_group_pids([pid])
            print(f"Stopped agent {name} (pid {pid}){' (killed)' if killed else ''}")
        else:
            print(f"Agent {name} (pid {pid}) was not running")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    path = data_dir_of(args) / "logs" / "master.log"
    try:
        log = path.open("r", errors="replace")
    except OSError as e:
        raise CliError(f"no master log at {path}: {e.strerror}") from None
    with log:
        sys.stdout.write(log.read())
        sys.stdout.flush()
        while not args.no_follow:  # like `docker logs -f`: until Ctrl-C
            chunk = log.read()
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
            else:
                time.sleep(0.5)
    return 0


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster-name", default=DEFAULT_CLUSTER_NAME,
                   help="which local cluster: 'determined' is .det-local, another name .det-local-<name>")
    p.add_argument("--data-dir", default=None, help="the cluster's data dir, named outright")


def _master_args(p: argparse.ArgumentParser) -> None:
    _cluster_args(p)
    p.add_argument("--master-config-path", default=None, help="master.yaml settings merged over the defaults")
    p.add_argument("--storage-host-path", default=None, help="where checkpoints go (shared_fs)")
    p.add_argument("--initial-user-password", default=None, help="password of admin and determined at first start")
    p.add_argument("--master-port", type=int, default=8080, help="master port (default 8080)")
    p.add_argument("--delete-db", action="store_true", help="start from an empty database")
    p.add_argument("--slots-per-agent", type=int, default=1, help="slots each agent offers (default 1)")
    p.add_argument("--agent-environment", action="append", default=[], metavar="NAME=PATH",
                   help="a task environment every agent offers (see `det deploy local up -h`)")
    for flag in ("--det-version", "--db-password", "--image-repo-prefix", "--auto-work-dir", "--master-name"):
        p.add_argument(flag, default=None, help=argparse.SUPPRESS)
    for flag in ("--no-autorestart", "--enterprise-edition"):
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Adds Determined's verbs beside `up` and `down` under `det deploy local`."""
    p = sub.add_parser("cluster-up", help="Determined's verb: a master and --agents agents (default 1)")
    _master_args(p)
    p.add_argument("--agents", type=int, default=1, help="number of agents (default 1)")
    p.add_argument("--gpu", dest="gpu", action="store_true", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-gpu", dest="gpu", action="store_false", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_cluster_up)

    p = sub.add_parser("master-up", help="Determined's verb: the master alone")
    _master_args(p)
    p.set_defaults(func=cmd_master_up, agents=0)

    for verb, func, what in (("cluster-down", cmd_cluster_down, "the master and its agents"),
                             ("master-down", cmd_master_down, "the master alone")):
        p = sub.add_parser(verb, help=f"Determined's verb: stop {what}")
        _cluster_args(p)
        if verb == "cluster-down":
            p.add_argument("--delete-db", action="store_true", help="also remove the database")
        else:
            p.add_argument("--master-name", default=None, help=argparse.SUPPRESS)
            p.add_argument("--delete-db", action="store_true", help=argparse.SUPPRESS)
        p.set_defaults(func=func)

    p = sub.add_parser("agent-up", help="Determined's verb: one more agent of a local cluster")
    p.add_argument("master_host", help="the master's host (this cluster's)")
    _cluster_args(p)
    p.add_argument("--master-port", type=int, default=8080, help="master port (default 8080)")
    p.add_argument("--agent-name", default=None, help="accepted; agents are named local-agent-N in order")
    p.add_argument("--agent-resource-pool", default=None, help=argparse.SUPPRESS)
    for flag in ("--det-version", "--agent-config-path", "--image-repo-prefix"):
        p.add_argument(flag, default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-autorestart", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gpu", dest="gpu", action="store_true", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-gpu", dest="gpu", action="store_false", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_agent_up)

    p = sub.add_parser("agent-down", help="Determined's verb: stop an agent (--agent-name) or all (--all)")
    _cluster_args(p)
    p.add_argument("--agent-name", default=None)
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_agent_down)

    p = sub.add_parser("logs", help="Determined's verb: the master's log, followed unless --no-follow")
    _cluster_args(p)
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.set_defaults(func=cmd_logs)
