"""Task environments the agent offers: Python installations a task can run in.

Determined runs a task in the Docker image its ``environment.image`` names. With no Docker engine
here, an environment is a Python virtualenv (or interpreter) on the agent's host, declared with
``--environment NAME=PATH``; the agent's own interpreter is always ``default``. A task in an
environment gets its ``bin`` first on ``PATH`` (so ``python3``, ``pip`` and console scripts are the
environment's) and ``VIRTUAL_ENV`` when it is a virtualenv; the sandbox shows it what that
interpreter needs (the venv, the base installation it links to, its ``sys.path``), even under a
directory such as ``/root`` that the task's user could not otherwise enter. Nothing of the agent's
own interpreter is added to it: what its tasks import must be installed in it.

Each declared environment is checked at start by running its interpreter; one that is missing or
does not run stops the agent with a message naming it, rather than failing every task later.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.wire.agent_protocol import DEFAULT_ENVIRONMENT

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0
# Run by the environment's interpreter (isolated: no PYTHON* variables, no user site): where it lives.
# Where pip puts packages under a prefix of this interpreter's (relative to it): a venv over it
# (``task_python.py``'s layers), then ``pip --prefix`` (its preferred prefix scheme: ``posix_local`` on
# Debian's own Python adds ``local/``). Defined once, run in the probe and in the agent for ``default``.
_LAYER_LIBS = (
    "def layer_libs():\n"
    " import sysconfig\n"
    " names = sysconfig.get_scheme_names()\n"
    " pick = getattr(sysconfig, 'get_preferred_scheme', None)\n"
    " prefix = pick('prefix') if pick else 'posix_prefix'\n"
    " out = []\n"
    " for scheme, key in (('venv' if 'venv' in names else 'posix_prefix', 'purelib'), (prefix, 'purelib'),\n"
    "                     (prefix, 'platlib')):\n"
    "  path = sysconfig.get_path(key, scheme, vars={'base': '/@', 'platbase': '/@'})\n"
    "  if path.startswith('/@/') and path[3:] not in out:\n"
    "   out.append(path[3:])\n"
    " return out\n"
)
_PROBE = _LAYER_LIBS + (
    "import importlib.util,json,os,sys;print(json.dumps({'prefix':sys.prefix,'base_prefix':sys.base_prefix,"
    "'exec_prefix':sys.exec_prefix,'base_exec_prefix':sys.base_exec_prefix,"
    "'executable':os.path.realpath(sys.executable),'path':[p for p in sys.path if p],"
    "'version':sys.version.split()[0],'determined':importlib.util.find_spec('determined') is not None,"
    "'layer_libs':layer_libs()}))"
)


class EnvironmentUnavailable(SystemExit):
    """A declared environment's interpreter is missing or does not run: the agent must not start."""


@dataclass(frozen=True)
class TaskEnvironment:
    name: str
    python: Path  # the interpreter as declared (a venv's own bin/python3, not what it links to)
    bin_dir: Path  # first on the task's PATH
    virtual_env: Path | None  # VIRTUAL_ENV for a virtualenv, else None
    paths: tuple[Path, ...] = ()  # what a task must see to run it (real paths)
    version: str = ""
    determined_harness: bool = False  # Determined's own package is installed: its launcher runs Trial classes
    sys_path: tuple[str, ...] = ()  # its own sys.path, in order (what a layer over it adds: task_python.py)
    layer_libs: tuple[str, ...] = ()  # where pip puts packages under a prefix, relative to it (_LAYER_LIBS)


def _interpreter(path: Path) -> Path:
    """The interpreter of a venv directory (bin/python3, else bin/python) or the path itself."""
    if path.is_dir():
        for name in ("python3", "python"):
            candidate = path / "bin" / name
            if candidate.exists():
                return candidate
        raise ValueError(f"{path} is a directory without bin/python3 (not a virtualenv)")
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if not os.access(path, os.X_OK):
        raise ValueError(f"{path} is not executable")
    return path


def _real_paths(paths: Iterable[str]) -> tuple[Path, ...]:
    return tuple(sorted({Path(os.path.realpath(p)) for p in paths if p and os.path.exists(p)}))


def probe(name: str, path: Path, timeout: float = PROBE_TIMEOUT_S) -> TaskEnvironment:
    """Run the environment's interpreter once; raises ValueError saying why it cannot be offered."""
    python = _interpreter(path)
    try:
        done = subprocess.run([str(python), "-I", "-c", _PROBE], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"{python} does not run: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or "").strip()[-300:]
        raise ValueError(f"{python} does not run (exit {done.returncode})" + (f": {said}" if said else ""))
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise ValueError(f"{python} did not answer as a Python interpreter: {done.stdout[-200:]!r}") from exc
    venv = Path(info["prefix"]) if info["prefix"] != info["base_prefix"] else None
    seen = [info["prefix"], info["base_prefix"], info["exec_prefix"], info["base_exec_prefix"],
            os.path.dirname(info["executable"]), str(python.parent), *info["path"]]
    env = TaskEnvironment(name, python, python.parent, venv, _real_paths(seen), str(info.get("version", "")),
                          bool(info.get("determined")), tuple(info["path"]), tuple(info.get("layer_libs") or ()))
    if not (env.bin_dir / "python3").exists():
        log.warning("environment %s: %s has no python3, so `python3` in its tasks is not %s", name, env.bin_dir,
                    python)
    return env


def default_environment() -> TaskEnvironment:
    """The agent's own interpreter, with what tasks need of it (the core API's package too)."""
    from .sandbox import runtime_paths

    python = Path(sys.executable)
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
    scope: dict[str, Any] = {}
    exec(_LAYER_LIBS, scope)  # this module's own constant, the code the probe runs
    return TaskEnvironment(DEFAULT_ENVIRONMENT, python, python.parent, venv, tuple(runtime_paths()),
                           sys.version.split()[0], sys_path=tuple(p for p in sys.path if p),
                           layer_libs=tuple(scope["layer_libs"]()))


def load_environments(declared: Iterable[tuple[str, Path]]) -> dict[str, TaskEnvironment]:
    """``default`` plus every declared environment, each checked by running it; raises
    EnvironmentUnavailable naming the first that cannot be offered."""
    out = {DEFAULT_ENVIRONMENT: default_environment()}
    for name, path in declared:
        try:
            out[name] = probe(name, path)
        except ValueError as exc:
            raise EnvironmentUnavailable(f"det-agent: environment {name!r} ({path}) cannot be offered: {exc}") from exc
        log.info("environment %s: Python %s at %s", name, out[name].version, out[name].python)
    return out
