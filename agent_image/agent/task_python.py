"""Python packages a job installs for itself: a writable layer per task, a cached one per experiment.

The task's environment (``environments.py``) is the host's, read-only in the sandbox, so a plain
``pip install`` there fails with EROFS. Every task therefore gets a layer of its own over it:

- ``<task dir>/python``, read-write at ``/run/determined/python`` (``TASK_LAYER``): its
  ``lib/pythonX.Y/site-packages`` (and where ``pip --prefix`` puts packages for this interpreter,
  ``environments._LAYER_LIBS``) first on ``PYTHONPATH``, its ``bin`` first on ``PATH``,
  ``PIP_PREFIX`` and ``PYTHONUSERBASE`` naming it. So ``pip install x`` in a startup hook or an
  OpenPAI command (``pip --quiet install scipy && python train.py``) installs there and the
  entrypoint imports it; the layer goes with the task directory.
- The layer is also a virtualenv over the environment (``pyvenv.cfg``, its interpreter in
  ``venv-bin/``, not on ``PATH``, a ``.pth`` adding the environment's ``sys.path``), and ``pip``,
  ``pip3`` and ``pipX.Y`` in its ``bin`` run pip under that interpreter: for pip the environment's
  packages are then outside the environment it installs into, so a version other than the
  environment's (``pip install -U numpy``, a pinned requirement) is installed in the layer over it
  instead of failing to remove the read-only one, and ``--user`` (refused in a virtualenv) names the
  layer too. ``python3`` itself stays the environment's, so ``sys.prefix`` (where Jupyter and others
  find their data) does not move; ``python3 -m pip`` installs into the layer through ``PIP_PREFIX``
  but cannot replace a package of the environment itself.
- ``environment.pip_requirements`` (this platform's key; Determined has none and installs from
  ``startup-hook.sh``, which works here too) is installed by the agent before anything of the task
  runs, in a sandbox of its own with the task's mounts, network and environment variables, into a
  layer built the same way, with pip's lines in the task's logs. It is then mounted read-only at
  ``/run/determined/pip-requirements`` (``REQUIREMENTS_LAYER``), behind the task's own layer.

The cache. A built requirements layer stays on the agent (``<work dir>/python-layers/<key>``) and
later tasks with the same key mount it instead of installing again. The key is the sha256 of the
cluster, the experiment and its owner, its context's hash, the requirement lines, the task's
``PIP_*`` variables and the interpreter: so the trials of one experiment share a layer (the next
trial downloads nothing), and no task ever mounts a layer built for another user's experiment.
Why not share more widely (by requirement hash alone, or a pip cache every task writes): the build
runs code the experiment chose (sdists' build scripts, an index it names, files of its context),
so a layer shared across users would let one user's experiment plant code in another's; within
one experiment it is the owner's own code either way. The build runs in a sandbox that ends before
the layer is marked complete (its PID namespace goes with it), and later tasks get it read-only,
so a running task cannot change what the next trial imports. Tasks of one key that start together
wait for one build; a failed build is removed (the next task tries again); the least recently used
layers no task holds are removed past ``KEEP_LAYERS``.

A failed install ends the task at once with ``TaskExited.setup_failed``: pip's own message is in the
task's logs, and the master ends the trial in ERROR without spending ``max_restarts`` on a failure
a restart would only repeat. The same goes for a ``startup-hook.sh`` that fails before the
entrypoint starts (``task_setup.build_command``'s guard leaves ``SETUP_FAILED_FILE`` behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from controlplane.wire.agent_protocol import StartTask

from .environments import TaskEnvironment

log = logging.getLogger(__name__)

TASK_LAYER = "/run/determined/python"
# Not a string prefix of each other: pip tells what is in the environment it installs into by one.
REQUIREMENTS_LAYER = "/run/determined/pip-requirements"
LAYER_PYTHON_DIR = "venv-bin"  # the layer's own interpreter: beside bin, so not on PATH
REQUIREMENTS_FILE = "requirements.txt"
ENVIRONMENT_PTH = "_det_environment.pth"
SETUP_FAILED_ENV = "DET_SETUP_FAILED_FILE"
SETUP_FAILED_NAME = ".startup-hook-failed"  # in the task's layer: its startup hook failed
KEEP_LAYERS = 8

# Runs ``pip`` under the layer's interpreter (see the module doc); ``--user`` of an install names the
# layer, which is where it installs anyway. {python} is the layer's interpreter as the task sees it.
_PIP_SHIM = """#!/bin/sh
# det-agent: pip for this task's own layer ({layer}); see agent_image/agent/task_python.py
install=
for a do case $a in install) install=1;; esac; done
for a do shift; if [ -n "$install" ] && [ "$a" = --user ]; then continue; fi; set -- "$@" "$a"; done
unset PIP_PREFIX PIP_USER PIP_TARGET
exec {python} -m pip "$@"
"""


class SetupFailed(RuntimeError):
    """The task's requirements did not install: it ends here, not restarted (pip said why in its logs)."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def short_version(environment: TaskEnvironment) -> str:
    return ".".join(environment.version.split(".")[:2])


def _libs(environment: TaskEnvironment) -> tuple[str, ...]:
    return environment.layer_libs or (f"lib/python{short_version(environment)}/site-packages",)


def site_dir(layer: str, environment: TaskEnvironment) -> str:
    """The layer's own site-packages (a virtualenv's) as the task sees it."""
    return f"{layer}/{_libs(environment)[0]}"


def make_layer(host: Path, seen_as: str, environment: TaskEnvironment, *, behind: Sequence[str] = (),
               pip_shims: bool = True) -> None:
    """Write the virtualenv skeleton of a layer at ``host`` (seen by the task at ``seen_as``) over
    ``environment``; ``behind``: site dirs between it and the environment (the requirements layer)."""
    real = os.path.realpath(environment.python)
    host.mkdir(parents=True, exist_ok=True)
    (host / "pyvenv.cfg").write_text(f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n"
                                     f"version = {environment.version}\n")
    pydir = host / LAYER_PYTHON_DIR
    pydir.mkdir(exist_ok=True)
    for name in ("python3", "python", f"python{short_version(environment)}"):
        with contextlib.suppress(FileNotFoundError):
            (pydir / name).unlink()
        (pydir / name).symlink_to(real)
    site = host / _libs(environment)[0]
    site.mkdir(parents=True, exist_ok=True)
    # addsitedir keeps each directory's place if sys.path has it already and reads its .pth files
    paths = [*behind, *environment.sys_path]
    (site / ENVIRONMENT_PTH).write_text(f"import site; list(map(site.addsitedir, {paths!r}))\n")
    bindir = host / "bin"
    bindir.mkdir(exist_ok=True)
    if pip_shims:
        shim = _PIP_SHIM.format(layer=seen_as, python=f"{seen_as}/{LAYER_PYTHON_DIR}/python3")
        for name in ("pip", "pip3", f"pip{short_version(environment)}"):
            (bindir / name).write_text(shim)
            os.chmod(bindir / name, 0o755)


def _prepend(value: str, first: Sequence[str]) -> str:
    return os.pathsep.join([*first, *([value] if value else [])])


def task_env(env: dict[str, str], environment: TaskEnvironment, layer: str, requirements: str | None) -> None:
    """The task's variables for its layer at ``layer`` and the requirements layer (None: none)."""
    sites = [f"{layer}/{lib}" for lib in _libs(environment)]
    bins = [f"{layer}/bin"]
    if requirements is not None:
        sites.append(site_dir(requirements, environment))
        bins.append(f"{requirements}/bin")
    env["PATH"] = _prepend(env.get("PATH", ""), bins)
    env["PYTHONPATH"] = _prepend(env.get("PYTHONPATH", ""), sites)
    env.setdefault("PIP_PREFIX", layer)
    env["PYTHONUSERBASE"] = layer  # an interpreter outside a virtualenv reads the layer as its user site
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env[SETUP_FAILED_ENV] = f"{layer}/{SETUP_FAILED_NAME}"


def install_env(env: dict[str, str], requirements: str) -> dict[str, str]:
    """The install's variables: the task's own, with the requirements layer's bin first."""
    out = dict(env)
    out["PATH"] = _prepend(out.get("PATH", ""), [f"{requirements}/bin"])
    for name in ("PIP_PREFIX", "PIP_TARGET", "PIP_USER"):
        out.pop(name, None)
    out.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    out["PIP_NO_INPUT"] = "1"
    return out


def install_argv(requirements: str) -> list[str]:
    return [f"{requirements}/{LAYER_PYTHON_DIR}/python3", "-m", "pip", "install", "-r",
            f"{requirements}/{REQUIREMENTS_FILE}"]


def requirements_text(lines: Sequence[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def requirements_key(msg: StartTask, environment: TaskEnvironment, cluster_id: str) -> str:
    """Which tasks share a requirements layer: the same experiment of the same cluster and owner,
    context, requirements, pip settings and interpreter (see the module doc)."""
    experiment = msg.env.get("DET_EXPERIMENT_ID", "")
    scope = {
        "cluster": msg.env.get("DET_CLUSTER_ID") or cluster_id,
        "owner": msg.env.get("DET_USER", ""),
        "experiment": experiment or f"allocation {msg.allocation_id}",  # no experiment: this task's own
        "context": msg.context_hash or f"task {msg.task_id}",
        "requirements": list(msg.pip_requirements),
        "pip": sorted([k, v] for k, v in msg.env.items() if k.startswith("PIP_")),
        "python": [os.path.realpath(environment.python), str(environment.python), environment.version],
    }
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()[:40]


def setup_failed(layer_host: Path) -> bool:
    """Whether the task's startup hook failed before its entrypoint started."""
    return (layer_host / SETUP_FAILED_NAME).exists()


class RequirementLayers:
    """The agent's built requirements layers: ``<root>/<key>/layer``, complete once
    ``<root>/<key>/complete`` exists (written by the agent, outside what the build could write)."""

    def __init__(self, root: Path, keep: int = KEEP_LAYERS) -> None:
        self.root = root
        self.keep = keep
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        if root.is_dir():  # a build an earlier agent process left unfinished
            for entry in root.iterdir():
                if not (entry / "complete").exists():
                    shutil.rmtree(entry, ignore_errors=True)

    def layer(self, key: str) -> Path:
        return self.root / key / "layer"

    def ready(self, key: str) -> bool:
        return (self.root / key / "complete").exists()

    def fresh(self, key: str) -> Path:
        """An empty layer directory for a build (what an earlier, failed one left is gone)."""
        self.discard(key)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        (self.root / key).mkdir()
        path = self.layer(key)
        path.mkdir()
        return path

    def prepare(self, key: str, seen_as: str, environment: TaskEnvironment, requirements: Sequence[str],
                owner: tuple[int, int] | None) -> Path:
        """Blocking: a fresh layer for a build, its requirements file written, given to the task's uid."""
        layer = self.fresh(key)
        (layer / REQUIREMENTS_FILE).write_text(requirements_text(requirements))
        make_layer(layer, seen_as, environment, pip_shims=False)
        if owner is not None:
            for dirpath, dirnames, filenames in os.walk(layer):
                for name in (".", *dirnames, *filenames):
                    os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)
        return layer

    def complete(self, key: str) -> None:
        (self.root / key / "complete").write_text("")

    def discard(self, key: str) -> None:
        shutil.rmtree(self.root / key, ignore_errors=True)

    @contextlib.asynccontextmanager
    async def building(self, key: str, stop: asyncio.Event) -> AsyncIterator[bool]:
        """One build of a key at a time: the tasks that start together wait for the first. Yields
        False, holding nothing, when ``stop`` is set first (the task was killed while waiting)."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        acquire = asyncio.ensure_future(lock.acquire())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([acquire, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
        held = acquire.done() and not acquire.cancelled()
        try:
            yield held and not stop.is_set()
        finally:
            if held:
                lock.release()

    def hold(self, key: str) -> None:
        self._users[key] = self._users.get(key, 0) + 1

    def release(self, key: str) -> None:
        left = self._users.get(key, 1) - 1
        if left:
            self._users[key] = left
        else:
            self._users.pop(key, None)
        marker = self.root / key / "complete"
        with contextlib.suppress(OSError):
            os.utime(marker)  # last used
        self._evict()

    def _evict(self) -> None:
        if not self.root.is_dir():
            return
        done = []
        for entry in self.root.iterdir():
            with contextlib.suppress(OSError):
                done.append(((entry / "complete").stat().st_mtime, entry))
        done.sort(reverse=True)
        for _, entry in done[self.keep:]:
            if not self._users.get(entry.name) and not self._locks.get(entry.name, asyncio.Lock()).locked():
                log.info("removing the least recently used requirements layer %s", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
