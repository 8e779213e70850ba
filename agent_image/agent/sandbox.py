"""Runs a task under bubblewrap (``bwrap``), laid out like a Determined task container.

What the task gets: its own mount, PID, IPC and UTS namespaces; the host read-only (its top-level
entries bound on a root of the sandbox's own, remounted read-only once set up); a fresh
``/proc`` and ``/dev``; a private ``/tmp``, ``/dev/shm`` (each as large as the task's disk quota,
at most half the memory) and ``/run``; its info files read-only at
``/run/determined/info``; its unpacked context read-write at ``/run/determined/workdir`` (the
cwd); for a ``shared_fs`` checkpoint storage, its allocation's own staging directory read-write at
the ``container_path`` and, read-only beneath it, only the checkpoints the master names as its to
read (``StartTask.readable_checkpoints``): never the ``host_path`` itself, so no task reads or
changes another trial's checkpoints. The agent's
work dir (other tasks, the context cache), the join token file and every ``--hide`` path (the
master's data dir) are covered by an empty tmpfs (a file by ``/dev/null``). The network is shared:
tasks reach the master over loopback.

Who the task is: an agent running as root starts ``bwrap`` as root (it needs no user namespace to
mount) and the shim below drops to ``task_uid``/``task_gid`` (nobody) before the entrypoint, with
``no_new_privs`` set by bwrap, so the task is a real non-root user on the host and cannot read
root-only files such as ``/etc/shadow``. A non-root agent uses a user namespace that maps its own
uid to uid 1000 inside; the task then holds exactly the agent user's rights on whatever is not
hidden.

A dropped uid could not enter a directory such as ``/root`` (0700) on its way to an interpreter
installed there (pyenv's ``/root/.pyenv``): such a directory is covered by an empty tmpfs and only
what tasks need is bound back into it, read-only: the agent's interpreter and the core API's
package, and the task's environment (its venv, the base installation it links to, its
``sys.path``).

Signals: the agent kills a task by signalling its process group. bwrap does not forward signals
and dies of a SIGTERM, which would SIGKILL the task (``--die-with-parent``) before its grace. So
bwrap is started with SIGTERM blocked and the shim restores and unblocks it before exec, then says
so on a pipe (a SIGTERM sent earlier reaches only bwrap and is lost, so the agent holds a kill
until then); the task
shares bwrap's process group, and a SIGKILL of the group takes the whole PID namespace. For the
same reason there is no ``--new-session`` (it would move the task out of the group); its purpose,
keeping a task off the agent's terminal, is served by the agent's ``start_new_session``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INFO_DIR = "/run/determined/info"
WORKDIR = "/run/determined/workdir"
MODEL_COPY_DIR = "/run/determined/train/model"  # Determined's MANAGED_TRAINING_MODEL_COPY
SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"
RESOURCES_TYPE = "sandbox"
NOBODY = 65534
USERNS_UID = 1000
_FRESH = frozenset({"proc", "dev", "tmp", "run"})  # made new in every sandbox

# Runs inside the sandbox with the task's environment: restore SIGTERM, drop root, exec.
_SHIM = (
    "import os,signal,sys\n"
    "signal.signal(signal.SIGTERM,signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK,[signal.SIGTERM])\n"
    "u,g,r=int(sys.argv[1]),int(sys.argv[2]),int(sys.argv[3])\n"
    "if os.getuid()==0:\n"
    " os.setgroups([]);os.setresgid(g,g,g);os.setresuid(u,u,u)\n"
    "if r>=0:\n"
    " os.write(r,b'1');os.close(r)\n"
    "try:\n"
    " os.execvp(sys.argv[4],sys.argv[4:])\n"
    "except OSError as e:\n"
    " sys.stderr.write(f'{sys.argv[4]}: {e.strerror}\\n');os._exit(127)\n"
)


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot build a sandbox on this host."""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    writable: bool = False


def find_bwrap(name: str) -> str | None:
    """The bwrap executable named ``name`` (a path, or a name looked up on PATH)."""
    return shutil.which(name)


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _unsearchable_ancestor(path: Path) -> Path | None:
    """The highest directory above ``path`` that others cannot enter (a dropped uid could not
    reach ``path`` through it), or None."""
    for parent in reversed(path.parents):
        try:
            if not os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            return None
    return None


def _host_root() -> list[str]:
    """The host's top-level entries read-only on the sandbox's own root, rather than ``/`` itself,
    so that a mount point such as ``/determined_shared_fs`` can be made there."""
    args: list[str] = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if name in _FRESH:
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path) or os.path.isfile(path):
            args += ["--ro-bind", path, path]
    return args


def runtime_paths() -> list[Path]:
    """What the task needs from the host to run the agent's Python and the core API."""
    import controlplane

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.dirname(os.path.abspath(controlplane.__file__)))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted({Path(os.path.realpath(p)) for p in paths})


@dataclass(frozen=True)
class Sandbox:
    bwrap: str
    hidden: tuple[Path, ...] = ()
    task_uid: int = NOBODY
    task_gid: int = NOBODY
    tmpfs_size: int | None = None  # bytes each of the task's /tmp and /dev/shm may hold (None: the kernel's)

    @property
    def drops_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def uid(self) -> int:
        """The task's uid as the task sees it."""
        return self.task_uid if self.drops_root else USERNS_UID

    @property
    def owner(self) -> tuple[int, int] | None:
        """Host owner to give what the task must write (None: the agent's own user)."""
        return (self.task_uid, self.task_gid) if self.drops_root else None

    def command(self, argv: Sequence[str], mounts: Sequence[Mount], cwd: str, ready_fd: int = -1,
                environment_paths: Sequence[Path] = ()) -> list[str]:
        """The bwrap command line that runs ``argv`` in ``cwd`` with ``mounts``. The shim writes
        one byte to the inherited ``ready_fd`` once a SIGTERM would reach the task.
        ``environment_paths``: what the task's environment (environments.py) needs to be seen, its
        venv and the base interpreter it links to, shown like the agent's own interpreter."""
        args = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--hostname", "task"]
        if self.drops_root:
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user", "--uid", str(USERNS_UID), "--gid", str(USERNS_UID)]
        args += _host_root()
        size = ["--size", str(self.tmpfs_size)] if self.tmpfs_size else []
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", *size, "--tmpfs", "/tmp", "--perms", "1777", *size, "--tmpfs", "/dev/shm",
                 "--tmpfs", "/run", "--perms", "0755", "--dir", "/run/determined",
                 "--perms", "0755", "--dir", "/run/determined/train"]
        covered = [Path("/tmp"), Path("/run")]
        for path in self.hidden:
            inside_other = _covered(path, [h for h in self.hidden if h != path])
            if _covered(path, covered) or inside_other or not os.path.lexists(path):
                continue
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
        needed = sorted({*runtime_paths(), *(Path(os.path.realpath(p)) for p in environment_paths)})
        if self.drops_root:
            masks = sorted({a for p in needed if (a := _unsearchable_ancestor(p)) is not None})
            for mask in masks:
                if not _covered(mask, covered):
                    args += ["--tmpfs", str(mask)]
            covered += masks
        made: set[Path] = set()
        bound: list[Path] = []
        for path in needed:
            if _covered(path, covered) and not _covered(path, self.hidden) and not _covered(path, bound):
                # parents made inside a tmpfs must be enterable by the task (bwrap makes them 0700)
                for parent in reversed(path.parents):
                    if parent not in made and any(r in parent.parents for r in covered):
                        made.add(parent)
                        args += ["--perms", "0755", "--dir", str(parent)]
                args += ["--ro-bind", str(path), str(path)]
                bound.append(path)
        resolv = Path(os.path.realpath("/etc/resolv.conf"))
        if _covered(resolv, [Path("/run")]):
            args += ["--ro-bind-try", str(resolv), str(resolv)]
        for m in mounts:
            args += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
        args += ["--remount-ro", "/", "--chdir", cwd, "--", sys.executable, "-I", "-S", "-c", _SHIM,
                 str(self.task_uid), str(self.task_gid), str(ready_fd), *argv]
        return args

    def probe(self, timeout: float = 30.0) -> None:
        """Run ``true`` the way tasks run; raises SandboxUnavailable with bwrap's words."""
        try:
            done = subprocess.run(self.command(["true"], [], "/"), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout,
                                  preexec_fn=block_sigterm)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"{self.bwrap} could not run: {exc}") from exc
        if done.returncode != 0:
            raise SandboxUnavailable(f"{self.bwrap} failed (exit {done.returncode}): "
                                     f"{(done.stderr or '').strip()[-500:]}")


def block_sigterm() -> None:
    """preexec for bwrap: a SIGTERM for the task must not kill bwrap (see the module doc).
    Blocked rather than ignored, so that one sent before the shim runs stays pending and
    reaches the task as soon as the shim unblocks it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])


def shared_fs_mounts(trial_info: dict[str, Any] | None, allocation_id: str,
                     readable: Sequence[str] = ()) -> list[Mount]:
    """For an experiment with ``shared_fs`` checkpoint storage: its allocation's staging directory
    (``<host_path>/.staging/<allocation id>``) read-write at the container_path, where the task
    writes its checkpoints and the master publishes them from, and each checkpoint of ``readable``
    that exists in host_path read-only at ``<container_path>[/<storage_path>]/<uuid>``. The first
    mount is the staging directory; none at all for another storage."""
    from controlplane.storage.base import check_uuid
    from controlplane.storage.shared_fs import staging_dir, storage_subdir

    config = (trial_info or {}).get("config") or {}
    storage = config.get("checkpoint_storage") if isinstance(config, dict) else None
    if not isinstance(storage, dict) or storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return []
    host = Path(str(storage["host_path"]))
    target = str(storage.get("container_path") or SHARED_FS_CONTAINER_PATH)
    mounts = [Mount(staging_dir(host, allocation_id), target, writable=True)]
    sub = storage_subdir(storage.get("storage_path"))
    if sub is None:
        return mounts
    for uuid in readable:
        try:
            source = host / sub / check_uuid(uuid)
        except ValueError:
            continue
        if source.is_dir() and not source.is_symlink():
            mounts.append(Mount(source, str(Path(target) / sub / uuid)))
    return mounts


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ``root`` and everything under it (links not followed) to uid:gid."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def read_only_mounts(context_dir: Path, paths: Sequence[str]) -> list[Mount]:
    """Folders of the unpacked context bound read-only over themselves in the workdir (an OpenPAI
    job's codeDir). A path that leaves the context, or is not a folder in it, is skipped."""
    mounts = []
    root = context_dir.resolve()
    for rel in paths:
        source = (context_dir / rel).resolve()
        if ".." in Path(rel).parts or Path(rel).is_absolute() or root not in source.parents or not source.is_dir():
            continue
        mounts.append(Mount(source, f"{WORKDIR}/{source.relative_to(root)}"))
    return mounts
