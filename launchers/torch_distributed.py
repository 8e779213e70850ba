"""``python3 -m launchers.torch_distributed [TORCH_OVERRIDES... --] (--trial module:Class | script.py args...)``
(mirror of determined.launch.torch_distributed).

Each container of the gang runs::

    python3 -m torch.distributed.run --nnodes N --node_rank R --nproc_per_node S --max_restarts 0
        --master_addr CHIEF --master_port PORT [TORCH_OVERRIDES...]
        --module launchers.wrap_rank RANK -- WORKER...

N containers, R this one's rank (the chief is 0), S its slots, CHIEF/PORT the chief's address and
the c10d port the master chose (static rendezvous at the chief). The overrides come after these,
unchanged, so one given there wins. torch.distributed.run sets RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT for every worker; this launcher adds
``DET_CHIEF_IP`` and ``DET_DIST_PORTS`` (the core API's collectives) and ``USE_TORCH_DISTRIBUTED``.
WORKER is the Trial harness for ``--trial`` or the script. The shared monitor (``launchers.monitor``)
watches torch.distributed.run and, through ``launchers.wrap_rank``'s status files, every worker:
the first to fail gets the others SIGTERM, then SIGKILL after ``DET_LAUNCHER_GRACE_S`` (torch's own
shutdown waits 30 s on a failure whatever it is told), and the launcher exits with its code.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

from launchers import _cluster, monitor
from launchers.wrap_rank import STATUS_DIR_ENV

PROG = "launchers.torch_distributed"


def torchrun_command(gang: _cluster.Gang, overrides: list[str], worker: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(gang.nnodes),
            "--node_rank", str(gang.rank), "--nproc_per_node", str(gang.local_slots), "--max_restarts", "0",
            "--master_addr", gang.chief_addr, "--master_port", str(gang.chief_port), *overrides,
            "--module", "launchers.wrap_rank", "RANK", "--", *worker]


def torchrun_env(gang: _cluster.Gang, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({"DET_CHIEF_IP": gang.chief_addr, "DET_DIST_PORTS": ",".join(map(str, gang.dist_ports)),
                "USE_TORCH_DISTRIBUTED": "True"})
    # torch.distributed.run's grace between SIGTERM and SIGKILL when a worker fails or it is stopped.
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(math.ceil(monitor.grace_seconds(env))))
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _cluster.usage_if_asked(argv, __doc__)
    own, overrides, script = _cluster.split_overrides(argv)
    worker = _cluster.worker_command(own, script, PROG)
    if importlib.util.find_spec("torch") is None:
        raise SystemExit(f"{PROG}: the 'torch' package is not installed in {sys.executable} (pip install torch)")
    gang = _cluster.load()
    cmd = torchrun_command(gang, overrides, worker)
    env = torchrun_env(gang)
    status = env[STATUS_DIR_ENV] = monitor.status_dir()
    return monitor.run([monitor.Worker(cmd, env=env, name="torch.distributed.run")], log_prefix=PROG,
                       status_dir=status)


if __name__ == "__main__":
    sys.exit(main())
