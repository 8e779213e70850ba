"""core.DistributedContext: rank information and object collectives between real processes."""

from __future__ import annotations

import os
import socket

import pytest

from controlplane import core
from controlplane.core._distributed import dist_ports
from tests.controlplane.core.ranks import RankError, ok, run_ranks


def _collectives(dist: core.DistributedContext) -> dict:
    r = dist.rank
    return {
        "who": (dist.get_rank(), dist.get_size(), dist.get_local_rank(), dist.get_local_size(),
                dist.get_cross_rank(), dist.get_cross_size(), dist.is_chief, dist.is_local_chief),
        "gather": dist.gather({"rank": r, "sq": r * r}),
        "allgather": dist.allgather(f"r{r}"),
        "broadcast": dist.broadcast(f"from {r}"),
        "gather_local": dist.gather_local(r),
        "allgather_local": dist.allgather_local(r * 10),
        "broadcast_local": dist.broadcast_local(f"local chief is {r}"),
        "big": len(dist.allgather(bytes(3_000_000))[-1]),  # frames larger than a socket buffer
        "again": dist.allgather(r + 100),  # the order of calls is kept
    }


def test_collectives_over_two_machines_of_two_workers():
    results = ok(run_ranks(_collectives, 4, local_size=2))
    for r, out in enumerate(results):
        assert out["who"] == (r, 4, r % 2, 2, r // 2, 2, r == 0, r % 2 == 0)
        assert out["allgather"] == ["r0", "r1", "r2", "r3"]
        assert out["broadcast"] == "from 0"
        assert out["allgather_local"] == ([0, 10] if r < 2 else [20, 30])
        assert out["broadcast_local"] == ("local chief is 0" if r < 2 else "local chief is 2")
        assert out["big"] == 3_000_000 and out["again"] == [100, 101, 102, 103]
    assert results[0]["gather"] == [{"rank": r, "sq": r * r} for r in range(4)]
    assert [out["gather"] for out in results[1:]] == [None, None, None]
    assert results[0]["gather_local"] == [0, 1] and results[2]["gather_local"] == [2, 3]
    assert results[1]["gather_local"] is None and results[3]["gather_local"] is None


def test_two_workers_on_one_machine():
    results = ok(run_ranks(_collectives, 2))
    assert results[0]["gather"] == [{"rank": 0, "sq": 0}, {"rank": 1, "sq": 1}]
    assert results[1]["allgather_local"] == [0, 10] and results[1]["broadcast_local"] == "local chief is 0"


def test_one_worker_per_machine():
    results = ok(run_ranks(_collectives, 3, local_size=1))
    assert results[2]["allgather"] == ["r0", "r1", "r2"]
    assert results[2]["gather_local"] == [2] and results[2]["allgather_local"] == [20]


def test_a_single_process_needs_no_peers():
    dist = core.DistributedContext()
    assert (dist.rank, dist.size, dist.is_chief) == (0, 1, True)
    assert dist.gather(1) == [1] and dist.allgather(2) == [2] and dist.broadcast(3) == 3
    assert dist.gather_local(4) == [4] and dist.broadcast_local(5) == 5
    dummy = core.DummyDistributedContext()
    assert dummy.get_size() == 1 and dummy.get_num_agents() == 1


def test_rank_arguments_are_all_or_nothing():
    with pytest.raises(ValueError, match="must all be provided"):
        core.DistributedContext(rank=0, size=2)
    with pytest.raises(ValueError, match="inconsistent ranks"):
        core.DistributedContext(rank=2, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1)
    with pytest.raises(ValueError, match="chief_ip"):
        core.DistributedContext(rank=1, size=4, local_rank=1, local_size=2, cross_rank=0, cross_size=2)


def _from_env(_dist: None, which: str) -> tuple:
    if which == "torch":
        dist = core.DistributedContext.from_torch_distributed()
    elif which == "deepspeed":
        dist = core.DistributedContext.from_deepspeed()
    else:
        dist = core.DistributedContext.from_horovod()
    try:
        return (dist.rank, dist.size, dist.local_rank, dist.local_size, dist.cross_rank, dist.cross_size,
                dist.allgather(dist.rank))
    finally:
        dist.close()


@pytest.mark.parametrize("which", ["torch", "deepspeed", "horovod"])
def test_constructors_read_the_launcher_environment(which):
    results = ok(run_ranks(_from_env, 4, which, local_size=2, build=False))
    for r, out in enumerate(results):
        assert out == (r, 4, r % 2, 2, r // 2, 2, [0, 1, 2, 3])


def test_env_ports(monkeypatch):
    assert dist_ports({}) == (12360, 12376)
    assert dist_ports({"DET_DIST_PORTS": "4000,4001"}) == (4000, 4001)
    assert dist_ports({"DET_DIST_PORTS": "4000"}) == (4000, 4001)
    with pytest.raises(ValueError, match="DET_DIST_PORTS"):
        dist_ports({"DET_DIST_PORTS": "a,b"})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(KeyError, match="WORLD_SIZE is not set: is this process started by a launcher"):
        core.DistributedContext.from_torch_distributed()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    dist = core.DistributedContext.from_torch_distributed()  # GROUP_* default to one machine
    assert (dist.size, dist.cross_rank, dist.cross_size) == (1, 0, 1)


def _out_of_step(dist: core.DistributedContext) -> object:
    if dist.rank == 0:
        return dist.broadcast("x")
    return dist.allgather(None)


def test_collectives_out_of_step_name_both_sides():
    results = run_ranks(_out_of_step, 2, timeout=30)
    assert isinstance(results[1], RankError) and results[1].kind == "RuntimeError"
    assert "this process called allgather() while the chief (rank 0) called broadcast()" in results[1].message


def _worker_dies(dist: core.DistributedContext) -> object:
    dist.allgather(dist.rank)
    if dist.rank == 2:
        os._exit(3)
    return dist.allgather("after")


def test_a_worker_that_exits_breaks_the_collective_with_its_rank():
    results = run_ranks(_worker_dies, 3)
    assert results[2] == RankError("exit", "3")
    assert isinstance(results[0], RankError) and results[0].kind == "ConnectionError"
    assert "rank member 2 closed the connection during allgather()" in results[0].message


def _wrong_secret(dist: None, port_holder: list) -> object:
    rank = int(os.environ["RANK"])
    dist = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1,
                                   secret="right" if rank == 0 else "wrong")
    return dist.allgather(rank)


def test_a_worker_without_the_allocation_secret_is_refused():
    results = run_ranks(_wrong_secret, 2, [], build=False, env={"DET_DIST_CONNECT_TIMEOUT": "3"})
    assert isinstance(results[0], RankError) and results[0].kind == "TimeoutError"
    assert "workers [1] did not connect within 3s" in results[0].message
    assert isinstance(results[1], RankError) and results[1].kind == "ConnectionError"
    assert "cannot reach the chief (rank 0)" in results[1].message


def test_a_busy_port_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            core.DistributedContext(rank=0, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1,
                                    pub_port=port, secret="x")
