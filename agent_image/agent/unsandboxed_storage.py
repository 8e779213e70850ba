"""Where a task of an agent without a sandbox (``--task-runtime process``) writes its checkpoints.

Such a task sees the host as the agent's user does, so nothing stops it from writing anywhere;
but the master publishes only what its allocation staged (``master/checkpoint_files.py``), so it
is pointed at its staging directory as a sandboxed task is: ``checkpoint_storage.host_path`` in its
config (``trial.json`` and ``DET_EXPERIMENT_CONFIG``, which the core API and Determined's harness
read with ``DET_RESOURCES_TYPE=local-process``) becomes ``<host_path>/.staging/<allocation id>``,
and each checkpoint it may read (``StartTask.readable_checkpoints``) is a symbolic link there to
its published directory, at the same relative path a sandbox mounts it (the master never publishes
a link: ``checkpoint_files`` refuses one).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import msgspec

from controlplane.wire.agent_protocol import StartTask

from .sandbox import shared_fs_mounts
from .task_setup import make_staging_dir


def staged_view(msg: StartTask) -> StartTask:
    """Blocking. ``msg`` with its shared_fs host_path replaced by its staging directory (made, with
    the links to what it may read); ``msg`` itself for another storage."""
    mounts = shared_fs_mounts(msg.trial_info, msg.allocation_id, msg.readable_checkpoints)
    if not mounts:
        return msg
    staging, root = mounts[0].source, Path(mounts[0].target)
    links = {str(Path(m.target).relative_to(root)): m.source for m in mounts[1:]}
    make_staging_dir(staging, None, sorted({str(Path(rel).parent) for rel in links} - {"."}))
    for rel, source in links.items():
        with contextlib.suppress(FileExistsError):  # another rank of the gang on this agent made it
            os.symlink(source, staging / rel, target_is_directory=True)
    trial_info = dict(msg.trial_info or {})
    trial_info["config"] = _with_host_path(trial_info.get("config"), staging)
    env = dict(msg.env)
    if env.get("DET_EXPERIMENT_CONFIG"):
        env["DET_EXPERIMENT_CONFIG"] = json.dumps(_with_host_path(json.loads(env["DET_EXPERIMENT_CONFIG"]), staging))
    return msgspec.structs.replace(msg, trial_info=trial_info, env=env)


def _with_host_path(config: Any, staging: Path) -> Any:
    if not isinstance(config, dict) or not isinstance(config.get("checkpoint_storage"), dict):
        return config
    return {**config, "checkpoint_storage": {**config["checkpoint_storage"], "host_path": str(staging)}}
