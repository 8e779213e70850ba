"""Which processes belong to a `det deploy local` cluster, proven rather than guessed.

A process is this cluster's when either
- `pids.json` recorded its pid together with its start time (field 22 of `/proc/<pid>/stat`,
  clock ticks since boot), and the live process with that pid started at that same tick: a
  reused pid has another start time; or
- its environment carries `DET_LOCAL_CLUSTER_ID=<this cluster's id>`: `up` puts it in the
  environment of the master and agents it starts, and everything they start inherits it
  (agents the `local` provider launches, trials whose agent died).
A command line that merely mentions the data dir proves nothing (a sibling cluster's path can
contain ours, and `--data-dir ~` is in every path of the home directory), so it is never used.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from controlplane.common.processes import pid_exists

CLUSTER_ENV = "DET_LOCAL_CLUSTER_ID"
CLUSTER_ID_FILE = "local-cluster-id"


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the command name, which may hold spaces and parens)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    if not pid_exists(pid):
        return False
    fields = _stat_fields(pid)
    return fields is None or fields[0] not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; None if it is gone or unreadable."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def cluster_of(pid: int) -> str | None:
    """The `DET_LOCAL_CLUSTER_ID` in the process's environment, if it has one we may read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = (CLUSTER_ENV + "=").encode()
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def is_ours(pid: int, recorded_start: int | None, cluster_id: str | None) -> bool:
    """The live process `pid` is the one recorded (same start time), or carries our cluster id."""
    if not isinstance(pid, int) or pid <= 0 or not pid_alive(pid):
        return False
    if recorded_start is not None:
        return start_time(pid) == recorded_start
    return bool(cluster_id) and cluster_of(pid) == cluster_id


def cluster_id(data_dir: Path, *, create: bool) -> str | None:
    """The cluster's id, kept in `<data-dir>/local-cluster-id` (0600) so `down` knows it even
    without `pids.json`; created by `up` on first use."""
    path = data_dir / CLUSTER_ID_FILE
    try:
        found = path.read_text().strip()
    except OSError:
        found = ""
    if found or not create:
        return found or None
    new = secrets.token_hex(16)
    write_private(path, new + "\n")
    return new


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, mode 0600 from the first byte (an existing 0644 file is
    replaced, not reused)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700: it holds secrets."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def _ancestors() -> set[int]:
    found = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        fields = _stat_fields(pid)
        try:
            pid = int(fields[1]) if fields else 0
        except (IndexError, ValueError):
            break
    return found


def processes_of_cluster(cid: str) -> list[int]:
    """Live processes of this user whose environment carries cluster id `cid`, other than this
    command and its ancestors."""
    if not cid or not Path("/proc").is_dir():
        return []
    skip = _ancestors()
    uid = os.getuid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        if cluster_of(pid) == cid and pid_alive(pid):
            found.append(pid)
    return found


def listening_pids(port: int) -> list[int]:
    """Processes of this user with a TCP socket listening on `port` (any address), found through
    `/proc/net/tcp{,6}` and their open files; [] where that cannot be read (another user's process
    is listed by nobody)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is ADDR:PORT in hex; state 0A is LISTEN; field 9 is the socket's inode.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in inodes:
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return sorted(found)
