"""Warnings at experiment creation for a launcher the trial's environment cannot run.

A trial in the agents' default environment (no ``environment.image``) runs with the interpreter the
master and agents share (one virtualenv on a local cluster and in the baked agent image), so the
master can tell whether the packages a launcher needs are there: Horovod's launchers need
``horovod``, DeepSpeed's ``deepspeed``. Determined's names (``determined.launch.horovod``) run this
project's launchers in an environment without Determined's package, so both spellings count.
"""

from __future__ import annotations

import importlib.util
import re

from controlplane.config.experiment import ExperimentConfig

# launcher module -> the package it needs
NEEDS = {"horovod": "horovod", "autohorovod": "horovod", "deepspeed": "deepspeed"}
_LAUNCHER = re.compile(r"-m\s+(?:determined\.launch|launchers)\.(horovod|autohorovod|deepspeed)\b")


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def launcher_warnings(cfg: ExperimentConfig) -> list[str]:
    if cfg.environment.extra.get("image"):
        return []  # another environment: the agent that offers it knows what it holds
    entrypoint = cfg.entrypoint if isinstance(cfg.entrypoint, str) else " ".join(cfg.entrypoint)
    out = []
    for launcher in dict.fromkeys(m.group(1) for m in _LAUNCHER.finditer(entrypoint)):
        package = NEEDS[launcher]
        if not _installed(package):
            out.append(f"entrypoint: the {launcher} launcher needs the '{package}' package, which the agents' "
                       f"default environment does not have: the trial will fail; name an environment.image "
                       f"that has it (det agent list shows each agent's environments)")
    return out
