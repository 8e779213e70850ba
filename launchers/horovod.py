"""``python3 -m launchers.horovod [HVD_OVERRIDES... --] (--trial module:Class | script.py args...)``
(mirror of determined.launch.horovod).

The chief container (rank 0) runs::

    horovodrun -np WORLD -H det-container-0:N0,det-container-1:N1,... --start-timeout 600
        [HVD_OVERRIDES...] python3 -m launchers._worker horovod -- WORKER...

horovodrun reaches the hosts with ``ssh`` (including the chief's own alias, which the ``ssh`` shim of
``launchers._ssh`` runs locally); every other container's launcher serves SSH on the port the master
gave it, with the allocation's key pair, as for DeepSpeed. Each worker gets the shared variables
(RANK ... DET_DIST_PORTS, from HOROVOD_RANK and the others) and ``[rank=N]`` on its lines; the first
failure stops every worker (``launchers.monitor``).

Horovod is not installed here (its last release does not build against this torch): the launcher
then stops at start, naming the missing package and the command it would have run.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from launchers import _cluster, _ssh, monitor
from launchers.wrap_rank import STATUS_DIR_ENV

PROG = "launchers.horovod"
START_TIMEOUT_S = 600


def horovodrun_command(gang: _cluster.Gang, overrides: list[str], worker: list[str]) -> list[str]:
    hosts = ",".join(f"{_ssh.alias(i)}:{n}" for i, n in enumerate(gang.slot_counts))
    return ["horovodrun", "-np", str(gang.world_size), "-H", hosts, "--start-timeout", str(START_TIMEOUT_S),
            *overrides, sys.executable, "-m", "launchers._worker", "horovod", "--", *worker]


def gang_env(gang: _cluster.Gang) -> dict[str, str]:
    return {"DET_CHIEF_IP": gang.chief_addr, "DET_DIST_PORTS": ",".join(map(str, gang.dist_ports)),
            "USE_HOROVOD": "1"}


def missing(gang: _cluster.Gang) -> str | None:
    """What keeps Horovod from running here, or None."""
    if importlib.util.find_spec("horovod") is None:
        return "the 'horovod' package is not installed (pip install horovod)"
    if gang.is_chief and shutil.which("horovodrun") is None:
        return "horovodrun is not on PATH (it comes with the 'horovod' package)"
    if gang.nnodes > 1 and importlib.util.find_spec("asyncssh") is None:
        return "the 'asyncssh' package is not installed (pip install asyncssh)"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _cluster.usage_if_asked(argv, __doc__)
    own, overrides, script = _cluster.split_overrides(argv)
    worker = _cluster.worker_command(own, script, PROG)
    gang = _cluster.load()
    cmd = horovodrun_command(gang, overrides, worker)
    problem = missing(gang)
    if problem:
        raise SystemExit(f"{PROG}: {problem} in {sys.executable}; it would run: {shlex.join(cmd)}")
    if gang.nnodes > 1:
        _ssh.load_key(gang.ssh_key_file)
    if not gang.is_chief:
        return _ssh.serve_for_chief(port=gang.ssh_ports[gang.rank], key_file=gang.ssh_key_file,
                                    extra_env=gang_env(gang), prog=PROG, rank=gang.rank)
    work = Path(tempfile.mkdtemp(prefix="det-horovod-"))
    atexit.register(shutil.rmtree, work, True)
    env = {**os.environ, **gang_env(gang), **_ssh.write_tool_dir(work, gang.ssh_hosts(), gang.ssh_key_file)}
    status = env[STATUS_DIR_ENV] = monitor.status_dir()
    return monitor.run([monitor.Worker(cmd, env=env, name="horovodrun")], log_prefix=PROG, status_dir=status)


if __name__ == "__main__":
    sys.exit(main())
