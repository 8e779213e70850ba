"""ctx.distributed (mirrors determined.core.DistributedContext): who this worker is among the
trial's processes, and small collectives of picklable objects between them.

Determined moves these objects over ZMQ; here a small TCP protocol does the same job, with no
dependency beyond the standard library:

- The chief (rank 0) listens on the first of ``DET_DIST_PORTS`` (two free ports on the chief's
  container, given by the launchers; Determined's 12360/12376 when absent). Every other rank
  connects to ``chief_ip`` (``DET_CHIEF_IP``; loopback when all ranks share one machine) and proves
  it belongs to the allocation (HMAC of a server nonce keyed by the allocation's session token)
  before any object is exchanged.
- Each local chief (local_rank 0) listens on an ephemeral loopback port for the workers of its
  machine; the global ``allgather`` at start-up tells them which.
- A frame is an 8-byte length and a pickle of ``(operation, payload)``. Every rank must call the
  same collectives in the same order (as with Determined); a worker that calls ``broadcast`` while
  the chief calls ``allgather`` gets an error naming both, and a peer that exits breaks every
  collective with a message saying which rank went away.

``gather`` returns the list on the chief and None on the others, as in Determined.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import secrets
import socket
import struct
import time
from typing import Any

log = logging.getLogger("controlplane.core")

DEFAULT_PORTS = (12360, 12376)  # Determined's INTER_TRAIN_PROCESS_COMM_PORT_1 / _2
CONNECT_TIMEOUT_S = 300.0
_HEADER = struct.Struct("!Q")
_NONCE = 16
_OK = b"\x01"


def _connect_timeout() -> float:
    try:
        return float(os.environ.get("DET_DIST_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S))
    except ValueError:
        return CONNECT_TIMEOUT_S


def dist_ports(env: dict[str, str] | None = None) -> tuple[int, int]:
    """``DET_DIST_PORTS`` ("p1,p2", set by the launchers), else Determined's defaults."""
    raw = (os.environ if env is None else env).get("DET_DIST_PORTS", "")
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    try:
        ports = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"DET_DIST_PORTS must be two port numbers like '12360,12376', got {raw!r}") from None
    if not ports:
        return DEFAULT_PORTS
    return ports[0], ports[1] if len(ports) > 1 else ports[0] + 1


def _default_secret() -> bytes:
    """The allocation's session token: every process of the allocation has it, nothing else does."""
    token = os.environ.get("DET_DIST_SECRET") or os.environ.get("DET_SESSION_TOKEN")
    if not token:
        try:
            from controlplane.core._info import get_cluster_info

            info = get_cluster_info()
        except Exception:  # noqa: BLE001 - unreadable info files: run without a shared secret
            info = None
        token = info.session_token if info is not None else ""
    return token.encode()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


class _Peer:
    """One framed connection; ``who`` names the other side in errors."""

    def __init__(self, sock: socket.socket, who: str) -> None:
        self.sock = sock
        self.who = who

    def send(self, op: str, payload: Any) -> None:
        self.send_raw(pickle.dumps((op, payload), protocol=pickle.HIGHEST_PROTOCOL))

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(_HEADER.pack(len(data)) + data)
        except OSError as e:
            raise ConnectionError(f"lost the connection to {self.who} ({e}); did it exit?") from None

    def recv(self, op: str) -> Any:
        try:
            (length,) = _HEADER.unpack(_recv_exact(self.sock, _HEADER.size))
            their_op, payload = pickle.loads(_recv_exact(self.sock, length))
        except (EOFError, OSError) as e:
            reason = "closed the connection" if isinstance(e, EOFError) else str(e)
            raise ConnectionError(f"{self.who} {reason} during {op}(); did it exit?") from None
        if their_op != op:
            raise RuntimeError(f"collectives out of step: this process called {op}() while {self.who} "
                               f"called {their_op}(); every worker must call the same collectives in order")
        return payload

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Server:
    """The chief side of one group: a peer per member, in rank order."""

    def __init__(self, listener: socket.socket, members: int, secret: bytes, what: str) -> None:
        self.peers: list[_Peer] = []
        by_rank: dict[int, socket.socket] = {}
        deadline = time.monotonic() + _connect_timeout()
        try:
            while len(by_rank) < members:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = sorted(set(range(1, members + 1)) - set(by_rank))
                    raise TimeoutError(f"{what}: workers {missing} did not connect within "
                                       f"{_connect_timeout():.0f}s (DET_DIST_CONNECT_TIMEOUT)")
                listener.settimeout(remaining)
                try:
                    sock, _addr = listener.accept()
                except TimeoutError:
                    continue
                rank = self._handshake(sock, secret, members)
                if rank is None or rank in by_rank:
                    sock.close()
                    continue
                by_rank[rank] = sock
        except BaseException:
            for s in by_rank.values():
                s.close()
            raise
        finally:
            listener.close()
        self.peers = [_Peer(by_rank[r], f"{what} member {r}") for r in sorted(by_rank)]

    @staticmethod
    def _handshake(sock: socket.socket, secret: bytes, members: int) -> int | None:
        try:
            sock.settimeout(30.0)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nonce = secrets.token_bytes(_NONCE)
            sock.sendall(nonce)
            answer = _recv_exact(sock, 32 + 4)
            if not hmac.compare_digest(answer[:32], hmac.new(secret, nonce, hashlib.sha256).digest()):
                log.warning("refused a collective connection with a wrong allocation secret")
                return None
            (rank,) = struct.unpack("!I", answer[32:])
            if not 1 <= rank <= members:
                return None
            sock.sendall(_OK)
            sock.settimeout(None)
            return rank
        except (OSError, EOFError):
            return None

    def gather(self, op: str) -> list[Any]:
        return [p.recv(op) for p in self.peers]

    def broadcast(self, op: str, payload: Any) -> None:
        data = pickle.dumps((op, payload), protocol=pickle.HIGHEST_PROTOCOL)
        for p in self.peers:
            p.send_raw(data)

    def close(self) -> None:
        for p in self.peers:
            p.close()


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} for the workers' collectives: {e.strerror}") from None
    sock.listen(128)
    return sock


def _connect(host: str, port: int, my_id: int, secret: bytes, who: str) -> _Peer:
    deadline = time.monotonic() + _connect_timeout()
    delay = 0.05
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=10.0)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                nonce = _recv_exact(sock, _NONCE)
                sock.sendall(hmac.new(secret, nonce, hashlib.sha256).digest() + struct.pack("!I", my_id))
                if _recv_exact(sock, 1) != _OK:
                    raise EOFError
            except BaseException:
                sock.close()
                raise
            sock.settimeout(None)
            return _Peer(sock, who)
        except (OSError, EOFError) as e:
            if time.monotonic() + delay > deadline:
                raise ConnectionError(f"cannot reach {who} at {host}:{port} ({e or 'refused'}) within "
                                      f"{_connect_timeout():.0f}s; is it running, with the same secret?") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class DistributedContext:
    """Rank information and object collectives between a trial's worker processes.

    All six rank arguments are given together or not at all (then this is rank 0 of 1). With more
    than one machine (``local_size != size``) the chief's address is required: ``chief_ip``,
    ``DET_CHIEF_IP`` in the ``from_*`` constructors.
    """

    def __init__(self, *, rank: int | None = None, size: int | None = None, local_rank: int | None = None,
                 local_size: int | None = None, cross_rank: int | None = None, cross_size: int | None = None,
                 chief_ip: str | None = None, pub_port: int | None = None, pull_port: int | None = None,
                 port_offset: int = 0, force_tcp: bool = False, secret: str | bytes | None = None) -> None:
        given = (rank, size, local_rank, local_size, cross_rank, cross_size)
        if sum(x is not None for x in given) not in (0, 6):
            raise ValueError("rank, size, local_rank, local_size, cross_rank and cross_size must all be "
                             "provided if any are provided")
        self.rank = rank if rank is not None else 0
        self.size = size if size is not None else 1
        self.local_rank = local_rank if local_rank is not None else 0
        self.local_size = local_size if local_size is not None else 1
        self.cross_rank = cross_rank if cross_rank is not None else 0
        self.cross_size = cross_size if cross_size is not None else 1
        if not (0 <= self.rank < self.size and 0 <= self.local_rank < self.local_size <= self.size
                and 0 <= self.cross_rank < self.cross_size <= self.size):
            raise ValueError(f"inconsistent ranks: rank {self.rank} of {self.size}, local {self.local_rank} of "
                             f"{self.local_size}, cross {self.cross_rank} of {self.cross_size}")
        ports = dist_ports()
        self._pub_port = (pub_port if pub_port is not None else ports[0]) + port_offset
        self._pull_port = (pull_port if pull_port is not None else ports[1]) + port_offset
        if self.local_size != self.size:
            if not chief_ip:
                raise ValueError(f"this is a multi-machine job (local_size {self.local_size} != size {self.size}) "
                                 "but no chief_ip was given (DET_CHIEF_IP)")
            self._chief_ip = chief_ip
        else:
            self._chief_ip = "127.0.0.1"  # one machine: always loopback
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._server: _Server | None = None
        self._to_chief: _Peer | None = None
        self._local_server: _Server | None = None
        self._to_local_chief: _Peer | None = None
        self._closed = False
        if self.size > 1:
            self._init_ipc()

    def __repr__(self) -> str:
        return (f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
                f"local_size={self.local_size}, cross_rank={self.cross_rank}, cross_size={self.cross_size})")

    # ---- set-up ------------------------------------------------------------------------------
    def _init_ipc(self) -> None:
        secret = self._secret if self._secret is not None else _default_secret()
        if self.is_chief:
            listener = _listen("0.0.0.0" if self.cross_size > 1 else "127.0.0.1", self._pub_port)
            log.debug("chief waiting for %d workers on port %d", self.size - 1, self._pub_port)
            self._server = _Server(listener, self.size - 1, secret, "rank")
        else:
            self._to_chief = _connect(self._chief_ip, self._pub_port, self.rank, secret, "the chief (rank 0)")
        # Local groups: each machine's local chief serves its own workers on loopback.
        if self.local_size < 2:
            self.allgather(None)  # take part in the exchange the other machines need
        elif self.is_local_chief:
            listener = _listen("127.0.0.1", 0)
            self.allgather((self.cross_rank, listener.getsockname()[1]))
            self._local_server = _Server(listener, self.local_size - 1, secret, "local rank")
        else:
            chiefs = [x for x in self.allgather(None) if x is not None and x[0] == self.cross_rank]
            if len(chiefs) != 1:
                raise RuntimeError(f"found {len(chiefs)} local chiefs for machine {self.cross_rank}; "
                                   "LOCAL_RANK / GROUP_RANK are inconsistent across workers")
            self._to_local_chief = _connect("127.0.0.1", chiefs[0][1], self.local_rank, secret,
                                            f"the local chief of machine {self.cross_rank}")

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From the variables torch.distributed.run (and every launcher here) sets: RANK, WORLD_SIZE,
        LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE; chief address DET_CHIEF_IP."""
        env = os.environ
        size = _int_env("WORLD_SIZE")
        local_size = _int_env("LOCAL_WORLD_SIZE")
        return cls(rank=_int_env("RANK"), size=size, local_rank=_int_env("LOCAL_RANK"), local_size=local_size,
                   cross_rank=_int_env("GROUP_RANK", "CROSS_RANK", default=0),
                   cross_size=_int_env("GROUP_WORLD_SIZE", "CROSS_SIZE", default=_machines(size, local_size)),
                   chief_ip=chief_ip or env.get("DET_CHIEF_IP") or env.get("MASTER_ADDR"))

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From DeepSpeed's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE),
        or the torch names the launchers here also set."""
        size = _int_env("WORLD_SIZE")
        local_size = _int_env("LOCAL_SIZE", "LOCAL_WORLD_SIZE")
        return cls(rank=_int_env("RANK"), size=size, local_rank=_int_env("LOCAL_RANK"), local_size=local_size,
                   cross_rank=_int_env("CROSS_RANK", "GROUP_RANK", default=0),
                   cross_size=_int_env("CROSS_SIZE", "GROUP_WORLD_SIZE", default=_machines(size, local_size)),
                   chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP") or os.environ.get("MASTER_ADDR"))

    @classmethod
    def from_horovod(cls, hvd: Any = None, chief_ip: str | None = None) -> DistributedContext:
        """From an initialized ``hvd`` module (Determined's form), or without one from horovodrun's
        HOROVOD_* variables (falling back to the torch names)."""
        ip = chief_ip or os.environ.get("DET_CHIEF_IP") or os.environ.get("MASTER_ADDR")
        if hvd is not None:
            return cls(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
                       cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(), chief_ip=ip)
        size = _int_env("HOROVOD_SIZE", "WORLD_SIZE")
        local_size = _int_env("HOROVOD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")
        return cls(rank=_int_env("HOROVOD_RANK", "RANK"), size=size,
                   local_rank=_int_env("HOROVOD_LOCAL_RANK", "LOCAL_RANK"), local_size=local_size,
                   cross_rank=_int_env("HOROVOD_CROSS_RANK", "GROUP_RANK", default=0),
                   cross_size=_int_env("HOROVOD_CROSS_SIZE", "GROUP_WORLD_SIZE", default=_machines(size, local_size)),
                   chief_ip=ip)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in (self._server, self._to_chief, self._local_server, self._to_local_chief):
            if conn is not None:
                conn.close()

    # ---- who am I ----------------------------------------------------------------------------
    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        return self.cross_size

    # ---- collectives -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this DistributedContext is closed")

    def gather(self, stuff: Any) -> list[Any] | None:
        """Everyone's ``stuff`` to the chief, in rank order; the others get None."""
        return self._gather(stuff, self._server, self._to_chief, self.size, "gather")

    def gather_local(self, stuff: Any) -> list[Any] | None:
        return self._gather(stuff, self._local_server, self._to_local_chief, self.local_size, "gather_local")

    def allgather(self, stuff: Any) -> list[Any]:
        """Everyone's ``stuff``, in rank order, on every worker."""
        return self._allgather(stuff, self._server, self._to_chief, self.size, "allgather")

    def allgather_local(self, stuff: Any) -> list[Any]:
        return self._allgather(stuff, self._local_server, self._to_local_chief, self.local_size, "allgather_local")

    def broadcast(self, stuff: Any) -> Any:
        """The chief's ``stuff`` on every worker (the others' argument is ignored)."""
        return self._broadcast(stuff, self._server, self._to_chief, self.size, "broadcast")

    def broadcast_local(self, stuff: Any = None) -> Any:
        return self._broadcast(stuff, self._local_server, self._to_local_chief, self.local_size, "broadcast_local")

    def _gather(self, stuff: Any, server: _Server | None, peer: _Peer | None, n: int, op: str) -> list[Any] | None:
        if n < 2:
            return [stuff]
        self._check_open()
        if server is not None:
            out = [stuff, *server.gather(op)]
            server.broadcast(op, None)  # a worker may not start the next collective before this one ends
            return out
        assert peer is not None
        peer.send(op, stuff)
        peer.recv(op)
        return None

    def _allgather(self, stuff: Any, server: _Server | None, peer: _Peer | None, n: int, op: str) -> list[Any]:
        if n < 2:
            return [stuff]
        self._check_open()
        if server is not None:
            out = [stuff, *server.gather(op)]
            server.broadcast(op, out)
            return out
        assert peer is not None
        peer.send(op, stuff)
        return list(peer.recv(op))

    def _broadcast(self, stuff: Any, server: _Server | None, peer: _Peer | None, n: int, op: str) -> Any:
        if n < 2:
            return stuff
        self._check_open()
        if server is not None:
            server.broadcast(op, stuff)
            return stuff
        assert peer is not None
        return peer.recv(op)


class DummyDistributedContext(DistributedContext):
    """Rank 0 of 1."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)


def _int_env(*names: str, default: int | None = None) -> int:
    for name in names:
        value = os.environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None
    if default is not None:
        return default
    raise KeyError(f"environment variable {names[0]} is not set: is this process started by a launcher "
                   "(python3 -m launchers.torch_distributed ...)?")


def _machines(size: int, local_size: int) -> int:
    return max(1, size // local_size) if local_size else 1
