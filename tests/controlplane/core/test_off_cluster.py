"""Off the cluster core.init() still works: metrics printed, checkpoints kept locally."""

from __future__ import annotations

import json

import pytest

from controlplane import core


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    for var in ("DET_INFO_DIR", "DET_MASTER", "DET_SESSION_TOKEN", "DET_ALLOCATION_ID"):
        monkeypatch.delenv(var, raising=False)


def test_metrics_are_printed_and_checkpoints_round_trip(tmp_path, capsys):
    with core.init(checkpoint_dir=tmp_path / "ckpts", max_length=10) as ctx:
        assert ctx.info is None
        assert ctx.preempt.should_preempt() is False
        ctx.train.report_training_metrics(5, {"loss": 0.5})
        ctx.train.report_validation_metrics(10, {"loss": float("nan")})
        with ctx.checkpoint.store_path({"steps_completed": 10, "note": "x"}) as (path, uuid):
            (path / "weights.bin").write_bytes(b"abc")
        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "weights.bin").read_bytes() == b"abc"
            assert json.loads((restored / "metadata.json").read_text())["note"] == "x"
        assert ctx.checkpoint.get_metadata(uuid)["steps_completed"] == 10
        ctx.checkpoint.download(uuid, tmp_path / "copy")
        assert (tmp_path / "copy" / "weights.bin").exists()
        for op in ctx.searcher.operations():
            assert op.length == 10
            op.report_completed(0.1)
    out = capsys.readouterr().out
    assert "[metrics] training step=5 loss=0.5" in out and "validation step=10 loss=nan" in out


def test_defaults_print_metrics_and_use_cwd_checkpoints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with core.init(max_length_off_cluster=7) as ctx:
        ctx.train.report_validation_metrics(100, {"loss": 0.12})
        ctx.train.report_progress(0.5)  # no master: a no-op
        assert ctx.train.get_experiment_best_validation() is None
        with ctx.checkpoint.store_path({"steps_completed": 100}) as (path, uuid):
            (path / "w").write_text("w")
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            op.report_progress(3)
            op.report_completed(0.12)
        assert lengths == [7]
    assert (tmp_path / "checkpoints" / uuid / "w").read_text() == "w"
    assert "[metrics] validation step=100 loss=0.12" in capsys.readouterr().out


def test_invalid_hp_propagates_off_cluster(tmp_path):
    with pytest.raises(core.InvalidHP):
        with core.init(checkpoint_dir=tmp_path):
            raise core.InvalidHP("bad")


def test_a_failed_store_leaves_no_checkpoint(tmp_path):
    with core.init(checkpoint_dir=tmp_path) as ctx:
        with pytest.raises(OSError):
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
                (path / "half").write_text("x")
                raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_metadata_needs_steps_completed_and_validation_values(tmp_path):
    with core.init(checkpoint_dir=tmp_path) as ctx:
        with pytest.raises(ValueError, match="steps_completed"):
            with ctx.checkpoint.store_path({}):
                pass
        with pytest.raises(ValueError, match="'loss' is None"):
            ctx.train.report_validation_metrics(1, {"loss": None})
        with pytest.raises(RuntimeError, match="max_length"):
            next(ctx.searcher.operations())
