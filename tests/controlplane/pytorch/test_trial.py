"""PyTorchTrial trained for real (torch on CPU): learning, exact resume, lengths, preemption, DDP."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from controlplane import core, pytorch
from controlplane.pytorch._trainer import _max_length_from_config
from tests.controlplane.core.conftest import write_info
from tests.controlplane.core.ranks import ok, run_ranks
from tests.controlplane.pytorch.trials import MLPTrial, digest
from tests.support.cluster import free_port

HP = {"global_batch_size": 16, "lr": 0.1}
CONF = {"reproducibility": {"experiment_seed": 7}}


@pytest.fixture(autouse=True)
def off_cluster(monkeypatch):
    for var in ("DET_INFO_DIR", "DET_MASTER", "DET_SESSION_TOKEN", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(var, raising=False)
    MLPTrial.hook = None
    yield
    MLPTrial.hook = None


def train(ckpts: Path, max_length: pytorch.TrainUnit, latest: str | None = None, hparams: dict | None = None,
          conf: dict | None = None, **fit) -> MLPTrial:
    with pytorch.init(hparams=hparams or HP, exp_conf=conf or CONF, checkpoint_dir=str(ckpts)) as ctx:
        trial = MLPTrial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=max_length, latest_checkpoint=latest, **fit)
    return trial


def test_training_decreases_the_validation_loss(tmp_path, capsys):
    trial = train(tmp_path, pytorch.Batch(60), validation_period=pytorch.Batch(20), step_zero_validation=True,
                  reporting_period=pytorch.Batch(10))
    vals = trial.recorder.validations
    assert [v["batches"] for v in vals] == [0, 20, 40, 60]
    assert vals[-1]["validation_loss"] < 0.6 * vals[0]["validation_loss"]
    assert vals[-1]["accuracy"] > 0.7
    out = capsys.readouterr().out
    assert "[metrics] training step=10 loss=" in out and "[metrics] validation step=60" in out
    assert len(trial.recorder.checkpoints) == 3  # after each validation past 0 ('all' off the cluster)


def test_a_resumed_trial_continues_exactly_where_it_stopped(tmp_path):
    straight = train(tmp_path / "a", pytorch.Batch(30))
    first = train(tmp_path / "b", pytorch.Batch(13))
    uuid = first.recorder.checkpoints[-1]
    assert json.loads((tmp_path / "b" / uuid / "metadata.json").read_text())["steps_completed"] == 13
    assert {p.name for p in (tmp_path / "b" / uuid).iterdir()} == {
        "state_dict.pth", "trial_state.pkl", "load_data.json", "metadata.json"}
    resumed = train(tmp_path / "b", pytorch.Batch(30), latest=uuid)
    assert first.trained == list(range(13)) and resumed.trained == list(range(13, 30))
    # Weights, momentum, LR schedule, data order and every RNG stream: as if it never stopped.
    assert digest(resumed.net) == digest(straight.net)
    assert resumed.sched.get_last_lr() == straight.sched.get_last_lr()
    assert resumed.recorder.rng_at_end == straight.recorder.rng_at_end


def test_lengths_in_epochs_and_records(tmp_path):
    conf = {**CONF, "records_per_epoch": 64}  # 4 batches of 16 per epoch
    trial = train(tmp_path, pytorch.Epoch(3), conf=conf, validation_period=pytorch.Epoch(1))
    assert trial.trained == list(range(12)) and trial.recorder.epochs_ended == [0, 1, 2]
    assert [v["batches"] for v in trial.recorder.validations] == [4, 8, 12]
    assert [v["epochs"] for v in trial.recorder.validations] == [1, 2, 3]
    # Without records_per_epoch an epoch is the training loader's length: 96 records / 16.
    trial = train(tmp_path, pytorch.Epoch(1), hparams={**HP, "records": 96})
    assert trial.trained == list(range(6))
    cfg = {"searcher": {"max_length": {"records": 160}}}
    assert _max_length_from_config(cfg, 16) == pytorch.Batch(10)
    assert _max_length_from_config({"searcher": {"max_length": {"epochs": 2}}}, 16) == pytorch.Epoch(2)
    assert _max_length_from_config({"searcher": {"max_length": 7, "unit": "batches"}}, None) == pytorch.Batch(7)
    assert _max_length_from_config({"searcher": {"max_time": 5, "time_metric": "epochs"}}, None) == pytorch.Epoch(5)
    with pytest.raises(ValueError, match="global_batch_size"):
        _max_length_from_config(cfg, None)


def test_checkpoint_and_validation_periods(tmp_path):
    trial = train(tmp_path, pytorch.Batch(25), validation_period=pytorch.Batch(10),
                  checkpoint_period=pytorch.Batch([5, 12]), checkpoint_policy="none")
    assert [v["batches"] for v in trial.recorder.validations] == [10, 20, 25]
    steps = sorted(json.loads((tmp_path / u / "metadata.json").read_text())["steps_completed"]
                   for u in trial.recorder.checkpoints)
    assert steps == [5, 12, 25]  # the schedule, and one at the end


def test_test_mode_trains_and_validates_one_batch(tmp_path):
    trial = train(tmp_path, pytorch.Batch(100), test_mode=True)
    assert trial.trained == [0] and len(trial.recorder.validations) == 1


def test_a_trial_without_a_model_or_evaluation_is_refused(tmp_path):
    class NoEval(MLPTrial):
        evaluate_batch = pytorch.PyTorchTrial.evaluate_batch

    with pytorch.init(hparams=HP, exp_conf=CONF, checkpoint_dir=str(tmp_path)) as ctx:
        with pytest.raises(ValueError, match="exactly one of evaluate_batch"):
            pytorch.Trainer(NoEval(ctx), ctx).fit(max_length=pytorch.Batch(1))
    with pytorch.init(hparams=HP, exp_conf=CONF, checkpoint_dir=str(tmp_path)) as ctx:
        with pytest.raises(ValueError, match="max_length must be given off the cluster"):
            pytorch.Trainer(MLPTrial(ctx), ctx).fit()
        with pytest.raises(ValueError, match="could not find 'nope'"):
            ctx.get_hparam("nope")
        assert ctx.get_per_slot_batch_size() == 16 and ctx.get_global_batch_size() == 16


# ---- on the cluster (the recording fake master) -----------------------------------------------
CLUSTER_CONF = {"searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True,
                             "max_length": {"batches": 40}}}


def _cluster_info(tmp_path: Path, master_url: str, latest: str | None = None) -> Path:
    config = {**CLUSTER_CONF, "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "shared")}}
    write_info(tmp_path / "info", master_url, config, latest_checkpoint=latest, hparams=HP)
    return tmp_path / "info"


def test_preemption_checkpoints_at_the_next_batch_and_the_resume_loses_nothing(fake_master, tmp_path, monkeypatch):
    monkeypatch.setenv("DET_INFO_DIR", str(_cluster_info(tmp_path, fake_master.url)))

    def pause_at_9(trial: MLPTrial, batch_idx: int) -> None:
        if batch_idx == 9:
            fake_master.preempt.set()
            # Batch 9 ends once the chief's preemption watcher has the master's answer (its long poll).
            preempt = trial.context._core.preempt
            deadline = time.monotonic() + 30
            while not preempt.should_preempt(auto_ack=False):
                assert time.monotonic() < deadline, "the preemption watcher did not see the signal within 30 s"
                time.sleep(0.02)

    MLPTrial.hook = pause_at_9
    with pytorch.init() as ctx:
        first = MLPTrial(ctx)
        pytorch.Trainer(first, ctx).fit(reporting_period=pytorch.Batch(5))
    assert first.trained == list(range(10))  # stopped right after the batch that saw the signal
    assert len(fake_master.calls("POST", "/ack_preemption")) == 1
    ckpt = fake_master.checkpoint_reports()[-1].body
    assert ckpt["metadata"]["steps_completed"] == 10

    MLPTrial.hook = None
    fake_master.preempt.clear()
    monkeypatch.setenv("DET_INFO_DIR", str(_cluster_info(tmp_path, fake_master.url, latest=ckpt["uuid"])))
    with pytorch.init() as ctx:
        resumed = MLPTrial(ctx)
        pytorch.Trainer(resumed, ctx).fit(latest_checkpoint=ctx._core.info.latest_checkpoint,
                                          reporting_period=pytorch.Batch(5))
    assert resumed.trained == list(range(10, 40))
    training = [m["stepsCompleted"] for m in fake_master.metric_reports() if m["group"] == "training"]
    assert training == [5, 10, 15, 20, 25, 30, 35, 40]
    assert fake_master.checkpoint_reports()[-1].body["metadata"]["steps_completed"] == 40
    progress = [c.body["progress"] for c in fake_master.calls("POST", "/progress")]
    assert progress[-1] == 1.0


def test_a_warm_start_restores_another_trials_weights_and_counts_batches_afresh(fake_master, tmp_path, monkeypatch):
    """searcher.source_checkpoint_uuid: the master hands another trial's checkpoint to this trial's
    first run as DET_LATEST_CHECKPOINT (Determined's trial.go). Its weights come back, its batch
    count does not (the checkpoint's trial_state is another trial's)."""
    source = train(tmp_path / "shared", pytorch.Batch(13))  # trial 0's checkpoint, where the cluster's storage is
    uuid = source.recorder.checkpoints[-1]
    monkeypatch.setenv("DET_INFO_DIR", str(_cluster_info(tmp_path, fake_master.url, latest=uuid)))  # trial 7
    at_start: list[str] = []

    class Warm(MLPTrial):
        def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
            trial = self

            class WeightsAtStart(pytorch.PyTorchCallback):
                def on_training_start(self) -> None:  # after the restore, before the first batch
                    at_start.append(digest(trial.net))

            return {**super().build_callbacks(), "weights_at_start": WeightsAtStart()}

    with pytorch.init() as ctx:
        warm = Warm(ctx)
        pytorch.Trainer(warm, ctx).fit(latest_checkpoint=ctx._core.info.latest_checkpoint,
                                       reporting_period=pytorch.Batch(20))
    assert at_start == [digest(source.net)]
    assert warm.trained == list(range(40))  # all of searcher.max_length, counted from 0
    assert fake_master.checkpoint_reports()[-1].body["metadata"]["steps_completed"] == 40


# ---- two workers: DDP over gloo -----------------------------------------------------------------
def _ddp_worker(_dist: None, ckpts: str, gloo_port: int, max_batches: int, latest: str | None) -> dict:
    import torch.distributed as tdist

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{gloo_port}", rank=rank, world_size=size)
    try:
        dist = core.DistributedContext.from_torch_distributed()
        with pytorch.init(hparams=HP, exp_conf=CONF, distributed=dist, checkpoint_dir=ckpts) as ctx:
            trial = MLPTrial(ctx)
            pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(max_batches), latest_checkpoint=latest,
                                            validation_period=pytorch.Batch(10))
        return {"digest": digest(trial.net), "trained": trial.trained, "validations": trial.recorder.validations,
                "checkpoints": trial.recorder.checkpoints, "batch_size": trial.context.get_per_slot_batch_size()}
    finally:
        tdist.destroy_process_group()


def _ddp(tmp_path: Path, name: str, max_batches: int, latest: str | None = None) -> list[dict]:
    return ok(run_ranks(_ddp_worker, 2, str(tmp_path / name), free_port(), max_batches, latest, build=False))


def test_two_ddp_workers_agree_on_the_weights_and_resume_exactly(tmp_path):
    straight = _ddp(tmp_path, "a", 20)
    assert straight[0]["digest"] == straight[1]["digest"]  # gradients averaged, the same steps taken
    assert straight[0]["batch_size"] == 8  # 16 split over two slots
    assert straight[0]["validations"] == straight[1]["validations"] and len(straight[0]["validations"]) == 2
    assert straight[0]["validations"][-1]["validation_loss"] < 1.0
    # Only the chief wrote checkpoints; every worker learned their ids.
    assert straight[0]["checkpoints"] == straight[1]["checkpoints"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(straight[0]["checkpoints"])

    first = _ddp(tmp_path, "b", 7)
    resumed = _ddp(tmp_path, "b", 20, latest=first[0]["checkpoints"][-1])
    assert [r["trained"] for r in resumed] == [list(range(7, 20))] * 2
    assert resumed[0]["digest"] == resumed[1]["digest"] == straight[0]["digest"]
