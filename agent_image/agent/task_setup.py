"""What a task process sees: its info files, environment and command line.

Reproduces what Determined's ``prep_container`` + ``entrypoint.sh`` give a trial container
(reference §4.1–4.3): ``DET_INFO_DIR`` names the info files (``/run/determined/info`` in the
sandbox), the cwd is the unpacked context (``/run/determined/workdir`` in the sandbox),
``startup-hook.sh`` is sourced by bash, and ``python3`` on ``PATH`` is the task environment's
(``environments.py``; ``default`` is the agent's own interpreter). The platform's own in-task
wrappers (``AGENT_WRAPPERS``: an OpenPAI task's, a command's, shell's, notebook's or TensorBoard's
``python3 -m controlplane.exec.pai_task CMD``) run under the agent's interpreter, whichever the
environment, so a task environment without this platform's package (Determined's own venv) runs
them too; the command they start finds the environment's ``python3`` first on ``PATH``.
The agent's join token never reaches a task's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controlplane.wire.agent_protocol import Slot, StartTask

from .environments import TaskEnvironment

STARTUP_HOOK = "startup-hook.sh"
SSH_KEY_FILE = "ssh/id_ed25519"
SSH_HOST_KEY_FILE = "ssh/host_ed25519"
PORTS_FILE = "ports.json"
# Determined's legacy entrypoint, a Trial class as ``module:Class`` (dotted module, identifiers only).
LEGACY_ENTRYPOINT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
AGENT_SECRETS = ("DET_AGENT_JOIN_TOKEN",)
AGENT_WRAPPERS = frozenset({"controlplane.exec.pai_task"})  # `python3 -m` these: the agent's interpreter
# A startup hook that fails (its last command, or an `exit`) before the entrypoint starts leaves the file
# $DET_SETUP_FAILED_FILE names, so the agent tells a failed setup from a failed entrypoint (task_python.py).
HOOK_GUARD = "trap '[ $? = 0 ] || : > \"${DET_SETUP_FAILED_FILE:-/dev/null}\"' EXIT; "


def write_private_json(path: Path, data: Any) -> None:
    """Write JSON readable by the owner only (these files can hold the session token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.chmod(path, 0o600)


def cluster_info(msg: StartTask, master_url: str, cluster_id: str, agent_id: str) -> dict[str, Any]:
    return {
        "master_url": master_url,
        "cluster_id": msg.env.get("DET_CLUSTER_ID") or cluster_id,
        "agent_id": agent_id,
        "slot_ids": list(msg.slot_ids),
        "task_id": msg.task_id,
        "allocation_id": msg.allocation_id,
        "session_token": msg.session_token,
        "task_type": msg.task_type,
        "master_cert_name": None,
        "master_cert_file": None,
        "latest_checkpoint": msg.env.get("DET_LATEST_CHECKPOINT") or None,
    }


def write_info_files(info_dir: Path, msg: StartTask, master_url: str, cluster_id: str, agent_id: str,
                     slots: list[Slot] | None = None) -> None:
    info_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(info_dir, 0o700)
    write_private_json(info_dir / "cluster.json", cluster_info(msg, master_url, cluster_id, agent_id))
    if msg.trial_info is not None:
        write_private_json(info_dir / "trial.json", msg.trial_info)
    write_private_json(info_dir / "rendezvous.json", rendezvous_info(msg))
    write_private_json(info_dir / PORTS_FILE, ports_info(msg))
    write_private_json(info_dir / "resources.json", resources_info(msg, slots or []))
    if msg.ssh_key:
        write_private_text(info_dir / SSH_KEY_FILE, msg.ssh_key if msg.ssh_key.endswith("\n") else msg.ssh_key + "\n")
    if msg.ssh_host_key:
        write_private_text(info_dir / SSH_HOST_KEY_FILE, msg.ssh_host_key.rstrip("\n") + "\n")


def rendezvous_info(msg: StartTask) -> dict[str, Any]:
    """rendezvous.json: exactly Determined's three keys (its harness builds ``RendezvousInfo(**json)``
    and fails on any other key)."""
    return {
        "container_addrs": list(msg.container_addrs) or ["127.0.0.1"],
        "container_rank": msg.rank,
        "container_slot_counts": list(msg.container_slot_counts) or [len(msg.slot_ids)],
    }


def resources_info(msg: StartTask, slots: list[Slot]) -> dict[str, Any]:
    """resources.json: Determined's ``ResourcesInfo``, the UUIDs of the task's GPUs (none for CPU
    slots); its Trial API reads ``gpu_uuids`` to choose between CPU and GPU training."""
    return {"gpu_uuids": [s.uuid for s in cuda_slots(list(msg.slot_ids), slots)]}


def ports_info(msg: StartTask) -> dict[str, Any]:
    """ports.json: what this platform adds to the rendezvous: the ports the master chose for the
    allocation (``chief_port``, ``dist_ports``, one ``ssh_ports`` entry per container, 0 for the
    chief) and where the allocation's SSH key is (``ssh_key_file``, relative to the info dir), and the
    host key of the task's own SSH server (``ssh_host_key_file``: OpenPAI tasks)."""
    return {
        "chief_port": msg.chief_port,
        "dist_ports": list(msg.dist_ports),
        "ssh_ports": list(msg.ssh_ports),
        "ssh_key_file": SSH_KEY_FILE if msg.ssh_key else None,
        "ssh_host_key_file": SSH_HOST_KEY_FILE if msg.ssh_host_key else None,
    }


def write_private_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def make_staging_dir(staging: Path, owner: tuple[int, int] | None, subdirs: Sequence[str] = ()) -> None:
    """Creates an allocation's shared_fs staging directory (``<host_path>/.staging/<allocation>``,
    sandbox.shared_fs_mounts), the only part of host_path its task may write, owned by the task's
    uid; host_path and ``.staging`` stay the agent's (0700: no other user lists what is staged).
    Not "is_dir() then mkdir()": the agents of one machine start a gang's ranks at the same moment,
    and the agent that lost that race would fail the whole gang (EEXIST)."""
    staging.parent.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        staging.parent.mkdir(mode=0o700)
    staging.mkdir(exist_ok=True)
    made = [staging]
    for sub in subdirs:  # the storage_path the read-only checkpoints are mounted in: the task's too
        for part in reversed([staging / sub, *(staging / sub).parents]):
            if staging in part.parents and part not in made:
                part.mkdir(exist_ok=True)
                made.append(part)
    if owner is not None:
        for path in made:
            os.chown(path, *owner)


def cuda_slots(slot_ids: list[int], slots: list[Slot]) -> list[Slot]:
    """The task's slots that are GPUs, in the task's order."""
    by_id = {s.id: s for s in slots}
    return [by_id[i] for i in slot_ids if i in by_id and by_id[i].type == "cuda"]


def cuda_visible_devices(slot_ids: list[int], slots: list[Slot]) -> str:
    return ",".join(str(s.id) for s in cuda_slots(slot_ids, slots))


def build_env(
    msg: StartTask,
    *,
    master_url: str,
    cluster_id: str,
    agent_id: str,
    slots: list[Slot],
    info_dir: Path,
    base: dict[str, str] | None = None,
    environment: TaskEnvironment | None = None,
) -> dict[str, str]:
    """The task's environment variables. ``environment``: the task environment it runs in
    (None: the agent's own interpreter, without VIRTUAL_ENV)."""
    env = dict(os.environ if base is None else base)
    for name in AGENT_SECRETS:
        env.pop(name, None)
    env.update(msg.env)
    # Master-set values that the agent can also derive; the master's win.
    env.setdefault("DET_TASK_ID", msg.task_id)
    env.setdefault("DET_ALLOCATION_ID", msg.allocation_id)
    env.setdefault("DET_SESSION_TOKEN", msg.session_token)
    env.setdefault("DET_TASK_TYPE", msg.task_type)
    env.setdefault("DET_RESOURCES_ID", msg.allocation_id)
    if cluster_id:
        env.setdefault("DET_CLUSTER_ID", cluster_id)
    if msg.chief_port:  # Determined's launchers read the c10d port from here (default 29400)
        env.setdefault("C10D_PORT", str(msg.chief_port))
    if len(msg.dist_ports) == 2:
        # Determined's own harness (core.DistributedContext) binds its chief's broadcast sockets on
        # these, else on fixed ports 12360/12376: two allocations on one host would then meet each
        # other's workers ("got non-_HelloMessage"). The allocation's reserved pair is unique per host.
        env.setdefault("INTER_TRAIN_PROCESS_COMM_PORT_1", str(msg.dist_ports[0]))
        env.setdefault("INTER_TRAIN_PROCESS_COMM_PORT_2", str(msg.dist_ports[1]))
    env.update(
        {
            "DET_MASTER": master_url,
            "DET_AGENT_ID": agent_id,
            "DET_SLOT_IDS": json.dumps(list(msg.slot_ids)),
            "DET_CONTAINER_ID": msg.allocation_id,
            "DET_RESOURCES_TYPE": "local-process",
            "DET_INFO_DIR": str(info_dir),
            "CUDA_VISIBLE_DEVICES": cuda_visible_devices(list(msg.slot_ids), slots),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # The task's environment first on PATH: python3, pip and console scripts are its own.
    py_dir = str(environment.bin_dir) if environment is not None else os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    env["PATH"] = py_dir + (os.pathsep + path if path else "")
    venv = environment.virtual_env if environment is not None else None
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
    else:  # the agent's own, inherited, names another interpreter's venv
        env.pop("VIRTUAL_ENV", None)
    if environment is not None and environment.python != Path(sys.executable):
        env.pop("PYTHONHOME", None)  # the agent's, if any, is not the environment's
    if environment is not None and environment.determined_harness:
        # Determined 0.38.1's Trainer restores with torch.load's old default (torch < 2.6 loads full
        # pickles): without this a paused or preempted PyTorchTrial cannot resume on a newer torch.
        # It loads the trial's own checkpoints, or a warm-start source its owner chose and may read.
        env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    return env


def legacy_command(trial: str, slots_per_trial: int, determined_harness: bool = False) -> list[str]:
    """``entrypoint: model_def:MyTrial``: the Trial harness in one process for one slot, under the
    torch launcher (one worker per slot of the gang) for more. In an environment with Determined's
    own package, what its 0.38.1 ``exec/launch.py`` runs for any slot count: its torch launcher."""
    if determined_harness:
        return ["python3", "-m", "determined.launch.torch_distributed", "--trial", trial]
    if slots_per_trial > 1:
        return ["python3", "-m", "launchers.torch_distributed", "--trial", trial]
    return ["python3", "-m", "controlplane.exec.harness", trial]


# Determined's launcher modules, run as this project's in an environment without Determined's package
# (``python3 -m determined.launch.torch_distributed --trial model_def:MyTrial``, as the seeds write it).
_DETERMINED_LAUNCH = re.compile(r"(-m\s+)determined\.launch\.(torch_distributed|deepspeed|horovod|autohorovod|"
                                r"wrap_rank)\b")


def ours_for_determined(text: str, slots_per_trial: int) -> str:
    """``-m determined.launch.X`` -> ``-m launchers.X``; ``autohorovod`` is Horovod's launcher for a
    gang of several slots and, as Determined's, no Horovod at all for one (torch's runs the worker)."""
    def ours(m: re.Match[str]) -> str:
        name = m.group(2)
        if name == "autohorovod":
            name = "horovod" if slots_per_trial > 1 else "torch_distributed"
        return f"{m.group(1)}launchers.{name}"

    return _DETERMINED_LAUNCH.sub(ours, text)


def build_command(entrypoint: str | list[str], context_dir: Path, slots_per_trial: int = 1,
                  determined_harness: bool = False) -> list[str]:
    """argv for the entrypoint, sourcing ``startup-hook.sh`` first when the context has one.
    ``slots_per_trial`` (the whole gang's) and ``determined_harness`` (the task's environment has
    Determined's package) pick how a legacy ``module:Class`` entrypoint runs."""
    if isinstance(entrypoint, str) and LEGACY_ENTRYPOINT.fullmatch(entrypoint.strip()):
        entrypoint = legacy_command(entrypoint.strip(), slots_per_trial, determined_harness)
    if not determined_harness:
        entrypoint = (ours_for_determined(entrypoint, slots_per_trial) if isinstance(entrypoint, str) else
                      shlex.split(ours_for_determined(shlex.join(map(str, entrypoint)), slots_per_trial)))
    if isinstance(entrypoint, str):
        if (context_dir / STARTUP_HOOK).is_file():
            return ["bash", "-c", f"{HOOK_GUARD}source ./{STARTUP_HOOK} && trap - EXIT && exec sh -c "
                                  f"{shlex.quote(entrypoint)}"]
        return ["sh", "-c", entrypoint]
    argv = [str(a) for a in entrypoint]
    if not argv:
        raise ValueError("empty entrypoint")
    if len(argv) > 2 and argv[0] == "python3" and argv[1] == "-m" and argv[2] in AGENT_WRAPPERS:
        argv[0] = sys.executable
    if (context_dir / STARTUP_HOOK).is_file():
        return ["bash", "-c", f"{HOOK_GUARD}source ./{STARTUP_HOOK} && trap - EXIT && exec {shlex.join(argv)}"]
    return argv


def check_executable(program: str, context_dir: Path, path: str) -> None:
    """Raise FileNotFoundError unless ``program`` resolves as exec would resolve it in the task
    (a name on ``path``, or a path relative to the context)."""
    if "/" in program:
        found = os.path.isfile(program if os.path.isabs(program) else context_dir / program)
    else:
        found = shutil.which(program, path=path) is not None
    if not found:
        raise FileNotFoundError(f"{program}: no such executable")
