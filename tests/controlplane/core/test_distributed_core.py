"""core.init(distributed=...) with real worker processes against the recording fake master:
only the chief reports, every worker writes its shard of one checkpoint, all see preemption."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from controlplane import core
from tests.controlplane.core.conftest import experiment_config, write_info
from tests.controlplane.core.ranks import RankError, ok, run_ranks


def _train_and_checkpoint(dist: core.DistributedContext) -> dict:
    r = dist.rank
    with core.init(distributed=dist) as ctx:
        assert ctx.distributed is dist
        for step in (1, 2):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step, "rank": r})
        ctx.train.report_validation_metrics(2, {"validation_loss": 0.5})
        ctx.train.report_progress(0.5)
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            if dist.is_chief:
                op.report_progress(50)
                op.report_completed(0.5)
            else:
                with pytest.raises(RuntimeError, match="only call op.report_progress.. from the chief"):
                    op.report_progress(50)
        with ctx.checkpoint.store_path({"steps_completed": 2, "framework": "x", f"rank{r}": r},
                                       shard=True) as (path, uuid):
            (path / f"rank{r}.bin").write_bytes(bytes([r]) * (r + 1))
            (path / "sub").mkdir()
            (path / "sub" / f"part{r}").write_text(str(r))
            (path / "common.json").write_text('{"same": true}')  # identical on every rank: stored once
        with ctx.checkpoint.restore_path(uuid) as restored:
            files = sorted(str(p.relative_to(restored)) for p in restored.rglob("*") if p.is_file())
            metadata = json.loads((restored / "metadata.json").read_text())
        non_chief_single = None
        if not dist.is_chief:
            try:
                with ctx.checkpoint.store_path({"steps_completed": 2}):
                    pass
            except RuntimeError as e:
                non_chief_single = str(e)
        return {"uuid": uuid, "files": files, "metadata": metadata, "lengths": lengths,
                "non_chief_single": non_chief_single}


def test_only_the_chief_reports_and_every_worker_writes_its_shard(fake_master, tmp_path):
    storage = tmp_path / "shared"
    write_info(tmp_path / "info", fake_master.url, experiment_config(storage))
    results = ok(run_ranks(_train_and_checkpoint, 3, env={"DET_INFO_DIR": str(tmp_path / "info")}))
    uuid = results[0]["uuid"]
    assert {r["uuid"] for r in results} == {uuid}  # one checkpoint, the chief's uuid
    expected_files = ["common.json", "metadata.json", "rank0.bin", "rank1.bin", "rank2.bin",
                      "sub/part0", "sub/part1", "sub/part2"]
    for r in results:
        assert r["files"] == expected_files and r["lengths"] == [100]
        assert r["metadata"] == {"steps_completed": 2, "framework": "x", "rank0": 0, "rank1": 1, "rank2": 2}
    assert "non-chief worker (rank=1)" in results[1]["non_chief_single"]
    # The master heard each thing once, from the chief.
    assert len(fake_master.calls("POST", "/runs/start")) == 1
    reports = fake_master.metric_reports()
    assert [(m["group"], m["stepsCompleted"]) for m in reports] == [("training", 1), ("training", 2),
                                                                   ("validation", 2)]
    assert all(m["metrics"]["avgMetrics"].get("rank", 0) == 0 for m in reports)
    assert len(fake_master.calls("POST", "/progress")) == 2  # train.report_progress + op.report_progress
    completed = fake_master.checkpoint_reports()
    assert len(completed) == 1 and completed[0].body["uuid"] == uuid
    assert len(fake_master.checkpoint_reports("STATE_ACTIVE")) == 1
    assert sorted(completed[0].body["resources"]) == expected_files
    assert completed[0].body["resources"]["rank2.bin"] == "3"
    assert sorted(p.name for p in (storage / "ckpts").iterdir()) == [uuid]  # no staging left behind


def _conflicting_shards(dist: core.DistributedContext) -> str:
    with core.init(distributed=dist, checkpoint_dir=Path.cwd() / "ckpts") as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}, shard=True) as (path, _uuid):
            (path / "weights.pt").write_text(f"rank {dist.rank}")
    return "stored"


def _failing_shard(dist: core.DistributedContext) -> str:
    with core.init(distributed=dist, checkpoint_dir=Path.cwd() / "ckpts") as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}, shard=True) as (path, _uuid):
            (path / f"w{dist.rank}").write_text("x")
            if dist.rank == 1:
                raise OSError("disk full on rank 1")
    return "stored"


def _conflicting_metadata(dist: core.DistributedContext) -> str:
    with core.init(distributed=dist, checkpoint_dir=Path.cwd() / "ckpts") as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1 + dist.rank}, shard=True):
            pass
    return "stored"


@pytest.fixture
def off_cluster(tmp_path, monkeypatch):
    for var in ("DET_INFO_DIR", "DET_MASTER", "DET_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "ckpts"


def test_shards_that_disagree_on_a_file_are_refused(off_cluster):
    results = run_ranks(_conflicting_shards, 2)
    for res in results:
        assert isinstance(res, RankError) and res.kind == "RuntimeError"
        assert "file conflicts" in res.message and "weights.pt given by ranks [0, 1]" in res.message
    assert not off_cluster.exists() or list(off_cluster.iterdir()) == []


def test_a_worker_that_fails_fails_every_worker_and_nothing_is_stored(off_cluster):
    results = run_ranks(_failing_shard, 3)
    assert results[1] == RankError("OSError", "disk full on rank 1")
    for res in (results[0], results[2]):
        assert isinstance(res, RankError) and "rank 1: OSError: disk full on rank 1" in res.message
    assert not off_cluster.exists() or list(off_cluster.iterdir()) == []


def test_metadata_that_disagrees_is_refused(off_cluster):
    results = run_ranks(_conflicting_metadata, 2)
    for res in results:
        assert isinstance(res, RankError) and "metadata conflicts" in res.message
        assert "/steps_completed given by ranks [0, 1]" in res.message


def _off_cluster_sharded_upload(dist: core.DistributedContext, src_root: str) -> dict:
    src = Path(src_root) / f"rank{dist.rank}"
    src.mkdir(parents=True)
    (src / f"w{dist.rank}").write_text(str(dist.rank))
    with core.init(distributed=dist, checkpoint_dir=Path.cwd() / "ckpts") as ctx:
        uuid = ctx.checkpoint.upload(src if dist.rank != 1 else None, {"steps_completed": 5}, shard=True)
        with ctx.checkpoint.restore_path(uuid) as path:
            return {"uuid": uuid, "files": sorted(p.name for p in path.iterdir())}


def test_sharded_upload_with_a_worker_that_has_nothing(off_cluster, tmp_path):
    results = ok(run_ranks(_off_cluster_sharded_upload, 3, str(tmp_path / "src")))
    assert results[0] == results[1] == results[2]
    assert results[0]["files"] == ["metadata.json", "w0", "w2"]


def _preempt(dist: core.DistributedContext, flag: str) -> list:
    seen = []
    with core.init(distributed=dist) as ctx:
        for _ in range(200):
            preempt = ctx.preempt.should_preempt()
            seen.append(preempt)
            if preempt:
                break
            if dist.is_chief and len(seen) == 3:
                Path(flag).write_text("go")  # the test flips the master's signal now
            time.sleep(0.05)
    return seen


def test_every_worker_sees_preemption_at_the_same_call(fake_master, tmp_path):
    write_info(tmp_path / "info", fake_master.url, experiment_config(tmp_path / "shared"))
    flag = tmp_path / "flag"
    import threading

    def flip() -> None:
        while not flag.exists():
            time.sleep(0.02)
        fake_master.preempt.set()

    threading.Thread(target=flip, daemon=True).start()
    results = ok(run_ranks(_preempt, 3, str(flag), env={"DET_INFO_DIR": str(tmp_path / "info")}))
    assert results[0][-1] is True and results[0] == results[1] == results[2]
    assert len(fake_master.calls("POST", "/ack_preemption")) == 1  # the chief acknowledges, once


def _chief_only_preempt(dist: core.DistributedContext) -> str:
    with core.init(distributed=dist, preempt_mode=core.PreemptMode.ChiefOnly) as ctx:
        if dist.is_chief:
            return str(ctx.preempt.should_preempt())
        try:
            ctx.preempt.should_preempt()
        except RuntimeError as e:
            return str(e)
    return "no error"


def test_chief_only_preemption_refuses_workers(off_cluster):
    results = ok(run_ranks(_chief_only_preempt, 2))
    assert results[0] == "False" and "ChiefOnly" in results[1] and "rank=1" in results[1]


def test_a_multi_slot_trial_needs_a_distributed_context(fake_master, tmp_path, monkeypatch):
    write_info(tmp_path / "info", fake_master.url, experiment_config(tmp_path / "shared"))
    cluster = json.loads((tmp_path / "info" / "cluster.json").read_text())
    (tmp_path / "info" / "cluster.json").write_text(json.dumps({**cluster, "slot_ids": [0, 1]}))
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="2 slots on 1 container.*launchers.torch_distributed"):
        core.init()
    assert fake_master.calls() == []
