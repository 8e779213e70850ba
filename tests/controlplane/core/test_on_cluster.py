"""core.init() on the cluster, against a recording fake master: wire shapes, auth, ordering."""

from __future__ import annotations

import json
import math
import time

import pytest

from controlplane import core
from tests.controlplane.core.conftest import ALLOC, TOKEN, experiment_config, write_info
from tests.support.storage_servers import moto_s3, s3_bucket  # noqa: F401 (fixtures)


def _wait_for(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_info_start_and_auth(fake_master, on_cluster):
    with core.init() as ctx:
        info = ctx.info
        assert info.master_url == fake_master.url and info.allocation_id == ALLOC and info.task_id == "1.abc"
        assert info.latest_checkpoint is None and info.session_token == TOKEN
        assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (7, 3, 42)
        assert info.trial.hparams == {"lr": 0.1} and info.trial.trial_run_id == 2
        assert info.trial.config["searcher"]["name"] == "single"
        assert ctx.distributed.get_rank() == 0 and ctx.distributed.size == 1
    start = fake_master.calls("POST", "/runs/start")[0]
    assert start.body == {"runId": 7, "checkpointStorage": info.trial.config["checkpoint_storage"]}
    first_poll = fake_master.calls("GET", "/signals/preemption")[0]
    assert first_poll.path == f"/api/v1/allocations/{ALLOC}/signals/preemption"
    assert first_poll.query["timeout_seconds"] == ["0"]
    for r in fake_master.calls():
        assert r.headers["Grpc-Metadata-x-allocation-token"] == f"Bearer {TOKEN}"
        assert "Authorization" not in r.headers


def test_metrics_are_batched_encoded_and_flushed_at_close(fake_master, on_cluster):
    fake_master.metrics_delay_s = 0.05  # a slow master: reports pile up into batches
    with core.init() as ctx:
        for step in range(1, 301):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(300, {"validation_loss": math.nan, "hi": math.inf, "lo": -math.inf})
        ctx.train.report_metrics("custom", 300, {"x": 1})
    batches = fake_master.calls("POST", "/metrics/batch")
    assert batches[0].path == "/api/v1/trials/7/metrics/batch"
    assert len(batches) < 100  # batched, not one call per report
    reports = fake_master.metric_reports()
    assert [r["stepsCompleted"] for r in reports if r["group"] == "training"] == list(range(1, 301))
    val = [r for r in reports if r["group"] == "validation"][0]
    assert set(val) == {"group", "stepsCompleted", "trialRunId", "reportTime", "metrics"}
    assert val["trialRunId"] == 2 and val["reportTime"].endswith("+00:00")
    assert val["metrics"] == {"avgMetrics": {"validation_loss": "NaN", "hi": "Infinity", "lo": "-Infinity"},
                              "batchMetrics": None}
    assert reports[-1]["group"] == "custom"


def test_transient_failures_are_retried_without_loss(fake_master, on_cluster):
    fake_master.fail["/api/v1/trials/7/metrics/batch"] = [503, 500]
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
    assert [r["stepsCompleted"] for r in fake_master.metric_reports()] == [1, 1, 1]  # 2 refused + 1 accepted
    assert len(fake_master.calls("POST", "/metrics/batch")) == 3


def test_a_4xx_is_raised_to_the_training_code(fake_master, on_cluster):
    fake_master.fail["/api/v1/trials/7/metrics/batch"] = [400]
    with pytest.raises(RuntimeError, match="400.*injected failure"):
        with core.init() as ctx:
            ctx.train.report_training_metrics(1, {"loss": 0.5})
            ctx.train.report_progress(0.5)  # unrelated calls still work
            ctx._shipper.flush()


def test_validation_values_must_be_numbers(fake_master, on_cluster):
    with core.init() as ctx:
        with pytest.raises(ValueError, match="'acc' is None"):
            ctx.train.report_validation_metrics(1, {"acc": None})
        with pytest.raises(ValueError, match="'acc' must be a number"):
            ctx.train.report_validation_metrics(1, {"acc": "high"})
        with pytest.raises(TypeError, match="JSON"):
            ctx.train.report_training_metrics(1, {"obj": object()})


def test_checkpoint_in_shared_fs_reported_after_its_metrics(fake_master, on_cluster):
    with core.init() as ctx:
        ctx.train.report_validation_metrics(100, {"validation_loss": 0.25})
        with ctx.checkpoint.store_path({"steps_completed": 100, "note": "n"}) as (path, uuid):
            assert path.parent == on_cluster / "ckpts" and path.name.startswith(f"{uuid}.tmp-")
            (path / "state.bin").write_bytes(b"12345")
            (path / "sub").mkdir()
            (path / "sub" / "x.txt").write_text("x")
        final = on_cluster / "ckpts" / uuid
        assert (final / "state.bin").read_bytes() == b"12345"
        assert json.loads((final / "metadata.json").read_text()) == {"steps_completed": 100, "note": "n"}
        assert [p.name for p in (on_cluster / "ckpts").iterdir()] == [uuid]  # no staging dir left
        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "sub" / "x.txt").read_text() == "x"
        assert ctx.checkpoint.get_metadata(uuid)["note"] == "n"
    announced, report = fake_master.calls("POST", "/api/v1/checkpoints")
    assert announced.body["state"] == "STATE_ACTIVE" and announced.body["uuid"] == uuid
    assert announced.body["resources"] == {}  # said before any file was uploaded
    metrics_post = fake_master.calls("POST", "/metrics/batch")[0]
    assert metrics_post.at < report.at
    assert metrics_post.body["reports"][0]["stepsCompleted"] == 100
    body = report.body
    assert body["uuid"] == uuid and body["taskId"] == "1.abc" and body["allocationId"] == ALLOC
    assert body["state"] == "STATE_COMPLETED" and body["storageId"] is None
    assert body["training"] == {"trialId": 7, "experimentId": 3}
    assert body["metadata"] == {"steps_completed": 100, "note": "n"}
    assert body["resources"] == {"state.bin": "5", "sub/x.txt": "1",
                                 "metadata.json": str(len(json.dumps(body["metadata"])))}
    assert body["reportTime"].endswith("+00:00")


def test_upload_download_and_failed_store(fake_master, on_cluster, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"ab")
    with core.init() as ctx:
        uuid = ctx.checkpoint.upload(src, {"steps_completed": 3})
        ctx.checkpoint.download(uuid, tmp_path / "dst")
        assert (tmp_path / "dst" / "w.bin").read_bytes() == b"ab"
        with pytest.raises(ValueError, match="steps_completed"):
            ctx.checkpoint.upload(src, {"epoch": 1})
        with pytest.raises(OSError):
            with ctx.checkpoint.store_path({"steps_completed": 4}) as (path, _):
                (path / "half").write_text("x")
                raise OSError("disk full")
    assert [p.name for p in (on_cluster / "ckpts").iterdir()] == [uuid]
    states = [r.body["state"] for r in fake_master.calls("POST", "/api/v1/checkpoints")]
    assert states == ["STATE_ACTIVE", "STATE_COMPLETED", "STATE_ACTIVE"]  # the failed one never completed


def test_restore_refuses_a_file_changed_after_the_report_naming_it(fake_master, on_cluster, tmp_path):
    """A pickle planted in a reported checkpoint is never handed to the code that loads it."""
    import hashlib

    from controlplane.storage import CheckpointChanged

    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "state.pt").write_bytes(b"weights")
        [report] = fake_master.checkpoint_reports()
        assert report.body["digests"]["state.pt"] == hashlib.sha256(b"weights").hexdigest()
        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "state.pt").read_bytes() == b"weights"
        (on_cluster / "ckpts" / uuid / "state.pt").write_bytes(b"planted")
        with pytest.raises(CheckpointChanged, match="'state.pt' was changed"):
            with ctx.checkpoint.restore_path(uuid):
                pass
        with pytest.raises(CheckpointChanged, match="'state.pt' was changed"):
            ctx.checkpoint.download(uuid, tmp_path / "dst")
        (on_cluster / "ckpts" / uuid / "state.pt").write_bytes(b"weights")
        (on_cluster / "ckpts" / uuid / "extra.pkl").write_bytes(b"planted")
        with pytest.raises(CheckpointChanged, match="'extra.pkl' was added"):
            with ctx.checkpoint.restore_path(uuid):
                pass


def test_restore_from_s3_refuses_an_object_changed_after_the_report(fake_master, request, tmp_path, monkeypatch):
    """A trial holds its bucket's credentials, so it can rewrite another trial's objects: the
    digests sent with the report are what refuse them."""
    from controlplane.storage import CheckpointChanged

    bucket = request.getfixturevalue("s3_bucket")
    write_info(tmp_path / "info", fake_master.url, {**experiment_config(tmp_path), "checkpoint_storage": {
        **bucket.config, "prefix": "ck"}})
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "state.pt").write_bytes(b"weights")
        bucket.client().put_object(Bucket=bucket.name, Key=f"ck/{uuid}/state.pt", Body=b"planted")
        with pytest.raises(CheckpointChanged, match="'state.pt' was changed"):
            with ctx.checkpoint.restore_path(uuid):
                pass


def test_searcher_and_progress(fake_master, on_cluster):
    with core.init() as ctx:
        ops = list(_completed(ctx.searcher.operations()))
        assert [op.length for op in ops] == [100]
        ctx.train.report_progress(0.25)
        assert ctx.train.get_experiment_best_validation() is None
        fake_master.best_metric = 0.125
        assert ctx.train.get_experiment_best_validation() == 0.125
    progress = [r.body for r in fake_master.calls("POST", "/api/v1/trials/7/progress")]
    assert progress == [{"progress": 0.5, "isRaw": True}, {"progress": 1.0, "isRaw": True},
                        {"progress": 0.25, "isRaw": True}]


def _completed(ops):
    for op in ops:
        op.report_progress(50)
        op.report_progress(500)  # capped at 1
        op.report_completed(0.1)
        yield op


def test_int_max_length(fake_master, tmp_path, monkeypatch):
    write_info(tmp_path / "info", fake_master.url, experiment_config(tmp_path, max_length=12))
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    with core.init() as ctx:
        op = next(ctx.searcher.operations())
        assert op.length == 12


def test_should_preempt_flips_and_acks_once(fake_master, on_cluster):
    with core.init() as ctx:
        assert ctx.preempt.should_preempt() is False
        fake_master.preempt.set()
        _wait_for(ctx.preempt.should_preempt)
        assert ctx.preempt.should_preempt() is True
    acks = fake_master.calls("POST", "/signals/ack_preemption")
    assert len(acks) == 1 and acks[0].path == f"/api/v1/allocations/{ALLOC}/signals/ack_preemption"
    assert acks[0].body is None
    polls = fake_master.calls("GET", "/signals/preemption")
    assert any(p.query["timeout_seconds"] == ["60"] for p in polls)


def test_env_fallback_without_info_files(fake_master, tmp_path, monkeypatch):
    monkeypatch.delenv("DET_INFO_DIR", raising=False)
    cfg = experiment_config(tmp_path)
    env = {"DET_MASTER": fake_master.url, "DET_SESSION_TOKEN": TOKEN, "DET_ALLOCATION_ID": ALLOC,
           "DET_TASK_ID": "1.abc", "DET_TRIAL_ID": "7", "DET_EXPERIMENT_ID": "3", "DET_TRIAL_RUN_ID": "1",
           "DET_TRIAL_SEED": "5", "DET_HPARAMS": '{"lr": 1}', "DET_EXPERIMENT_CONFIG": json.dumps(cfg),
           "DET_LATEST_CHECKPOINT": "abc", "DET_SLOT_IDS": "[0]"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with core.init() as ctx:
        assert ctx.info.latest_checkpoint == "abc" and ctx.info.trial.hparams == {"lr": 1}
        assert ctx.info.slot_ids == [0]
        ctx.train.report_training_metrics(1, {"loss": 1.0})
    assert fake_master.metric_reports()[0]["trialRunId"] == 1


def test_invalid_hp_reports_early_exit_and_exits_0(fake_master, on_cluster):
    with pytest.raises(SystemExit) as exited:
        with core.init():
            raise core.InvalidHP("lr too large")
    assert exited.value.code == 0
    assert fake_master.calls("POST", "/api/v1/trials/7/early_exit")[0].body == {
        "reason": "EXITED_REASON_INVALID_HP"}


def test_training_exceptions_propagate(fake_master, on_cluster):
    with pytest.raises(ZeroDivisionError):
        with core.init() as ctx:
            ctx.train.report_training_metrics(1, {"loss": 1.0})
            1 / 0  # noqa: B018 - the training code's own error
    assert len(fake_master.metric_reports()) == 1  # still flushed
