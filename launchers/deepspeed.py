"""``python3 -m launchers.deepspeed [DEEPSPEED_ARGS... --] (--trial module:Class | script.py args...)``
(mirror of determined.launch.deepspeed).

The chief container (rank 0) runs DeepSpeed's own runner::

    python3 -m deepspeed.launcher.runner --hostfile HOSTFILE --master_addr CHIEF --master_port PORT
        --no_ssh_check --no_python --no_local_rank [DEEPSPEED_ARGS...]
        python3 -m launchers._worker deepspeed -- WORKER...

HOSTFILE has one line per container of the gang (``det-container-i slots=N``; aliases, because
several containers may share one address); PORT is the chief's c10d port chosen by the master.
With more than one container the runner starts ``deepspeed.launcher.launch`` on each through
``pdsh``: a shim here (``launchers._ssh``) runs the chief's share locally and reaches every other
container over SSH, on the port the master gave it, with the allocation's key pair. Every other
container's launcher serves that SSH and exits when the chief's command there has ended.

Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (DeepSpeed's), plus
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, DET_CHIEF_IP and DET_DIST_PORTS, and its lines carry
``[rank=N]``. A failing worker stops the others (``launchers.monitor``) and the launcher exits non-zero.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from launchers import _cluster, _ssh, monitor
from launchers.wrap_rank import STATUS_DIR_ENV

PROG = "launchers.deepspeed"


def hostfile_text(gang: _cluster.Gang) -> str:
    return "".join(f"{_ssh.alias(i)} slots={n}\n" for i, n in enumerate(gang.slot_counts))


def runner_command(gang: _cluster.Gang, hostfile: str, overrides: list[str], worker: list[str]) -> list[str]:
    return [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", hostfile,
            "--master_addr", gang.chief_addr, "--master_port", str(gang.chief_port), "--no_ssh_check",
            "--no_python", "--no_local_rank", *overrides,
            sys.executable, "-m", "launchers._worker", "deepspeed", "--", *worker]


def gang_env(gang: _cluster.Gang) -> dict[str, str]:
    """What every process of this launcher's workers sees, on the chief and on the others."""
    return {"DET_CHIEF_IP": gang.chief_addr, "DET_DIST_PORTS": ",".join(map(str, gang.dist_ports)),
            "USE_DEEPSPEED": "1"}


def require(package: str, why: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise SystemExit(f"{PROG}: the '{package}' package is not installed in {sys.executable} "
                         f"(pip install {package}); {why}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _cluster.usage_if_asked(argv, __doc__)
    own, overrides, script = _cluster.split_overrides(argv)
    worker = _cluster.worker_command(own, script, PROG)
    require("deepspeed", "it runs this trial's workers")
    gang = _cluster.load()
    if gang.nnodes > 1:
        require("asyncssh", "it starts the workers of the other containers over SSH")
        _ssh.load_key(gang.ssh_key_file)  # fail at start, not at the first connection
    if not gang.is_chief:
        return _ssh.serve_for_chief(port=gang.ssh_ports[gang.rank], key_file=gang.ssh_key_file,
                                    extra_env=gang_env(gang), prog=PROG, rank=gang.rank)
    work = Path(tempfile.mkdtemp(prefix="det-deepspeed-"))
    atexit.register(shutil.rmtree, work, True)
    hostfile = work / "hostfile"
    hostfile.write_text(hostfile_text(gang))
    env = {**os.environ, **gang_env(gang), **_ssh.write_tool_dir(work, gang.ssh_hosts(), gang.ssh_key_file)}
    status = env[STATUS_DIR_ENV] = monitor.status_dir()
    cmd = runner_command(gang, str(hostfile), overrides, worker)
    return monitor.run([monitor.Worker(cmd, env=env, name="deepspeed")], log_prefix=PROG, status_dir=status)


if __name__ == "__main__":
    sys.exit(main())
