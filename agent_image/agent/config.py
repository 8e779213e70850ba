"""Command-line configuration of ``det-agent``.

Kept apart from the runtime so that flag parsing (and the token-file rule) can be tested
without starting an event loop.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controlplane.wire.agent_protocol import DEFAULT_ENVIRONMENT

from .disk_quota import parse_size

if TYPE_CHECKING:
    from .instance_metadata import InstanceMetadata

DEFAULT_TASK_DISK_QUOTA = 50 << 30


@dataclass(frozen=True)
class AgentConfig:
    master_url: str
    join_token: str
    agent_id: str
    slots: int | None
    slot_type: str  # "auto", "cpu" or "cuda"
    pool: str
    work_dir: Path
    log_level: str
    cloud: str = "none"  # "aws" | "gcp": identity and interruption notices from instance metadata
    metadata_url: str | None = None
    task_runtime: str = "sandbox"  # "sandbox" (bubblewrap) | "process" (no isolation)
    bwrap: str = "bwrap"
    hide: tuple[Path, ...] = ()  # paths tasks must not see, e.g. the master's data dir
    join_token_file: Path | None = None
    # Task environments it offers besides "default" (its own interpreter): (name, venv dir or
    # interpreter path), checked at start by environments.load_environments.
    environments: tuple[tuple[str, Path], ...] = ()
    # Bytes a task may hold in its work dir and checkpoint staging directory (and in each of its
    # /tmp and /dev/shm); None: no limit.
    task_disk_quota: int | None = DEFAULT_TASK_DISK_QUOTA
    # "auto": each job's sandboxed tasks in a network of their own where the agent can make one
    # (root, iproute2, slirp4netns), else the host's; "isolated": that or refuse to start; "host".
    task_network: str = "auto"
    # The instance type it runs on, reported to the master ("" when unknown): --instance-type,
    # else the cloud's metadata (with --cloud).
    instance_type: str = ""

    @property
    def ws_url(self) -> str:
        """The agent WebSocket URL: http→ws, https→wss, plus ``/agents/ws``."""
        url = self.master_url.rstrip("/")
        if url.startswith("https://"):
            url = "wss://" + url[len("https://") :]
        elif url.startswith("http://"):
            url = "ws://" + url[len("http://") :]
        elif not url.startswith(("ws://", "wss://")):
            url = "ws://" + url
        return url + "/agents/ws"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="det-agent", description="Control-plane agent: runs tasks for the master.")
    p.add_argument("--master", required=True, help="master URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--join-token", default=None, help="join token (or env DET_AGENT_JOIN_TOKEN)")
    p.add_argument("--join-token-file", default=None, help="file holding the join token")
    p.add_argument("--agent-id", default=None, help="agent id (default: hostname)")
    p.add_argument("--slots", type=int, default=None, help="number of artificial CPU slots when no GPU is found")
    p.add_argument(
        "--slot-type",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: GPUs from nvidia-smi, else CPU slots; cpu: never probe GPUs",
    )
    p.add_argument("--pool", default="default", help="resource pool name")
    p.add_argument("--work-dir", default=None, help="default ~/.local/share/controlplane-agent/<agent id>")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--cloud", choices=["none", "aws", "gcp"], default="none",
                   help="read the agent id (instance id / name) and spot interruption notices from the "
                        "instance metadata")
    p.add_argument("--metadata-url", default=None, help="instance metadata base URL (default: the cloud's own)")
    p.add_argument("--instance-type", default=None,
                   help="the instance type to report to the master (default: from the instance metadata "
                        "with --cloud, else none)")
    p.add_argument("--task-runtime", choices=["sandbox", "process"], default="sandbox",
                   help="sandbox: each task under bubblewrap (required unless 'process' is given); "
                        "process: plain processes as the agent's user, no isolation")
    p.add_argument("--bwrap", default="bwrap", help="the bubblewrap executable (a path or a name on PATH)")
    p.add_argument("--hide", action="append", default=[], metavar="PATH",
                   help="a path tasks must not see, e.g. the master's data dir (repeatable)")
    p.add_argument("--environment", action="append", default=[], metavar="NAME=PATH",
                   help="offer a task environment: tasks whose environment.image is NAME run with this "
                        "virtualenv directory (or Python interpreter) first on PATH (repeatable; "
                        f"{DEFAULT_ENVIRONMENT!r} is always this agent's own interpreter)")
    p.add_argument("--task-disk-quota", default="50G", metavar="SIZE",
                   help="what one task may hold in its work dir and checkpoint staging directory, "
                        "e.g. 20G or 512M (a task over it is stopped, saying so in its log); also the "
                        "size of its /tmp and /dev/shm (at most half the memory); 0: no limit")
    p.add_argument("--task-network", choices=["auto", "isolated", "host"], default="auto",
                   help="isolated: each job's tasks in a network namespace of their own, reaching the "
                        "master, their storage and the outside but no other task (needs root, iproute2 "
                        "and slirp4netns); host: the host's network; auto (default): isolated where "
                        "possible, else host with a warning")
    return p


# An environment's name as environment.image gives it: Docker-image-like characters, no spaces.
ENVIRONMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}")


def parse_environments(specs: list[str]) -> tuple[tuple[str, Path], ...]:
    """``NAME=PATH`` options as (name, absolute path); raises ValueError naming the bad one."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path:
            raise ValueError(f"--environment {spec!r}: expected NAME=PATH")
        if not ENVIRONMENT_NAME.fullmatch(name):
            raise ValueError(f"--environment {spec!r}: a name is letters, digits and ._:/@+- "
                             "(starting with a letter or digit)")
        if name == DEFAULT_ENVIRONMENT:
            raise ValueError(f"--environment {spec!r}: {DEFAULT_ENVIRONMENT!r} is always this agent's own "
                             "interpreter; pick another name")
        if name in out:
            raise ValueError(f"--environment {name!r} is given twice")
        out[name] = Path(path).expanduser().absolute()
    return tuple(out.items())


def _read_token(args: argparse.Namespace) -> str:
    if args.join_token_file:
        return Path(args.join_token_file).read_text().strip()
    if args.join_token:
        return str(args.join_token)
    return os.environ.get("DET_AGENT_JOIN_TOKEN", "")


def parse_config(argv: list[str] | None = None) -> AgentConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = _read_token(args)
    if not token:
        parser.error("a join token is required (--join-token or --join-token-file)")
    if args.slots is not None and args.slots < 0:
        parser.error("--slots must be >= 0")
    try:
        environments = parse_environments(args.environment)
    except ValueError as e:
        parser.error(str(e))
    try:
        quota = parse_size(args.task_disk_quota)
    except ValueError as e:
        parser.error(f"--task-disk-quota: {e}")
    agent_id = args.agent_id or (_cloud_identity(args) if args.cloud != "none" else socket.gethostname())
    work_dir = Path(args.work_dir) if args.work_dir else Path.home() / ".local/share/controlplane-agent" / agent_id
    return AgentConfig(
        master_url=args.master.rstrip("/"),
        join_token=token,
        agent_id=agent_id,
        slots=args.slots,
        slot_type=args.slot_type,
        pool=args.pool,
        work_dir=work_dir.expanduser().resolve(),
        log_level=str(args.log_level).upper(),
        cloud=args.cloud,
        metadata_url=args.metadata_url,
        task_runtime=args.task_runtime,
        bwrap=args.bwrap,
        hide=tuple(Path(h).expanduser().resolve() for h in args.hide),
        join_token_file=Path(args.join_token_file).expanduser().resolve() if args.join_token_file else None,
        environments=environments,
        task_disk_quota=quota or None,
        task_network=args.task_network,
        instance_type=args.instance_type if args.instance_type is not None else (
            _cloud_instance_type(args) if args.cloud != "none" else ""),
    )


def metadata_for(cloud: str, metadata_url: str | None) -> InstanceMetadata:
    from .instance_metadata import for_cloud

    return for_cloud(cloud, metadata_url)


def _cloud_identity(args: argparse.Namespace) -> str:
    from .instance_metadata import MetadataError

    try:
        return metadata_for(args.cloud, args.metadata_url).instance_id()
    except MetadataError as e:
        raise SystemExit(f"det-agent: {e}") from e


def _cloud_instance_type(args: argparse.Namespace) -> str:
    """The instance type from the metadata server; "" when it cannot say (nothing depends on it)."""
    from .instance_metadata import MetadataError

    try:
        return metadata_for(args.cloud, args.metadata_url).instance_type()
    except MetadataError:
        return ""
