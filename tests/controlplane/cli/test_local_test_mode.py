"""det experiment create --local --test-mode: a compressed run on this machine, no master, that says
which step passed and which failed, for a Core API script and for a Trial class."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from controlplane.cli.local_test import short_lengths, trial_of

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """\
import json, pathlib, sys
from controlplane import core

with core.init() as ctx:
    info = ctx.info
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((pathlib.Path(path) / "state.json").read_text())["steps"]
    for op in ctx.searcher.operations():
        while steps < op.length:
            steps += 1
            ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps})
        if "{mode}" == "crash":
            raise RuntimeError("the model diverged")
        ctx.train.report_validation_metrics(steps, {"{metric}": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, uuid):
            (path / "state.json").write_text(json.dumps({"steps": steps}))
        op.report_completed(0.5)
"""

CONFIG = {"name": "tiny", "entrypoint": "python3 train.py", "hyperparameters": {"lr": {"type": "const", "val": 0.1}},
          "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1000}}}


def _script_context(tmp_path: Path, *, mode: str = "ok", metric: str = "validation_loss",
                    restart_from_zero: bool = False) -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    source = SCRIPT.replace("{mode}", mode).replace("{metric}", metric)
    if restart_from_zero:
        source = source.replace("if info.latest_checkpoint:", "if False:")
    (ctx / "train.py").write_text(source)
    (ctx / "big.bin").write_bytes(b"x" * 10)
    (ctx / ".detignore").write_text("big.bin\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return config, ctx


@pytest.fixture(autouse=True)
def isolated(cli_env, monkeypatch):
    for var in ("DET_INFO_DIR", "DET_SESSION_TOKEN", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def test_a_script_passes_every_step(det, tmp_path):
    config, ctx = _script_context(tmp_path)
    r = det("experiment", "create", "--local", "--test-mode", str(config), str(ctx))
    assert r.rc == 0, r.out + r.err
    assert "Local test of tiny (script: python3 train.py)" in r.out and "4 batches, then 4 more" in r.out
    assert "[PASS] run the entrypoint: exit 0" in r.out
    assert "[PASS] report training metrics: 4 reports, last at step 4: loss=0.25" in r.out
    assert "[PASS] report validation metrics: step 4: validation_loss=0.5" in r.out
    assert "[PASS] store a checkpoint:" in r.out and "at step 4: 2 files" in r.out
    assert "continued from step 4 to 8" in r.out and "Local test passed: all 5 steps." in r.out


def test_json_and_a_failing_script(det, tmp_path):
    config, ctx = _script_context(tmp_path, mode="crash")
    r = det("experiment", "create", "--local", "--test-mode", "--json", str(config), str(ctx))
    assert r.rc == 1
    report = json.loads(r.out)
    assert report["passed"] is False and report["kind"] == "script" and report["hparams"] == {"lr": 0.1}
    by_name = {s["name"]: s for s in report["steps"]}
    run = by_name["run the entrypoint"]
    assert run["passed"] is False and "exit 1" in run["detail"] and "RuntimeError: the model diverged" in run["detail"]
    assert by_name["report training metrics"]["passed"] is True
    assert by_name["report validation metrics"]["passed"] is False
    assert by_name["store a checkpoint"]["passed"] is False
    assert by_name["resume from the checkpoint"]["detail"] == "skipped: the first run stored no checkpoint"
    assert Path(report["workdir"]).is_dir()  # kept for a look
    shutil.rmtree(report["workdir"])


def test_a_missing_searcher_metric_and_a_restart_from_zero_fail(det, tmp_path):
    config, ctx = _script_context(tmp_path, metric="loss", restart_from_zero=True)
    r = det("experiment", "create", "--local", "--test", str(config), str(ctx))
    assert r.rc == 1
    assert "[FAIL] report validation metrics: step 4: loss=0.5; the searcher's metric 'validation_loss' is missing" \
        in r.out
    assert "it started over instead of restoring" in r.out
    assert "Local test FAILED: 2 of 5 steps failed" in r.out


def test_a_trial_class(det, tmp_path):
    ctx = tmp_path / "ctx"
    shutil.copytree(ROOT / "examples" / "pytorch_trial", ctx)
    r = det("experiment", "create", "--local", "--test-mode", str(ctx / "const.yaml"), str(ctx))
    assert r.rc == 0, r.out + r.err
    assert "(trial model_def:SyntheticTrial)" in r.out and "controlplane.exec.harness model_def:SyntheticTrial" in r.out
    assert "[PASS] report training metrics: 4 reports, last at step 4" in r.out
    assert "[PASS] report validation metrics: step 4: validation_loss=" in r.out
    # 4 files of the trial and code/ (the context's 3 files), as Determined's harness writes a checkpoint
    assert "7 files" in r.out and "continued from step 4 to 8" in r.out
    assert "Local test passed" in r.out


def test_a_trial_class_that_fails(det, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "broken.py").write_text("from determined import pytorch\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "entrypoint": "python3 -m launchers.torch_distributed --trial "
                                                              "broken:MyTrial"}))
    r = det("experiment", "create", "--local", "--test-mode", str(config), str(ctx))
    assert r.rc == 1
    assert "(trial broken:MyTrial)" in r.out
    assert "[FAIL] run the trial: exit 1" in r.out
    assert "broken imports Determined's package" in r.out and "from controlplane import pytorch" in r.out
    assert "[FAIL] resume from the checkpoint: skipped" in r.out


def test_local_needs_test_mode_and_test_mode_needs_local(det, tmp_path):
    config, ctx = _script_context(tmp_path)
    r = det("experiment", "create", "--local", str(config), str(ctx))
    assert r.rc == 1 and "--local needs --test-mode" in r.err and "det deploy local up" in r.err
    r = det("experiment", "create", "--test-mode", str(config), str(ctx))
    assert r.rc == 1 and "--test-mode needs --local" in r.err
    r = det("experiment", "create", "--local", "--test-mode", str(config), str(tmp_path / "nope"))
    assert r.rc == 1 and "does not exist" in r.err


def test_which_trial_and_how_long():
    assert trial_of("model_def:MyTrial") == "model_def:MyTrial"
    assert trial_of("python3 -m launchers.torch_distributed --trial model_def:T") == "model_def:T"
    assert trial_of(["python3", "-m", "launchers.deepspeed", "--", "--trial=pkg.mod:T"]) == "pkg.mod:T"
    assert trial_of("python3 train.py --lr 1") is None
    assert trial_of("python3 x.py:main") is None
    assert short_lengths({"max_length": {"batches": 2}}, {}) == ({"max_length": {"batches": 2}},
                                                               {"max_length": {"batches": 4}}, "2 batches, then 2 more")
    assert short_lengths({"max_length": {"epochs": 10}}, {})[:2] == ({"max_length": {"epochs": 1}},
                                                                     {"max_length": {"epochs": 2}})
    assert short_lengths({"max_length": {"records": 10000}}, {"global_batch_size": 32})[0] == {
        "max_length": {"records": 128}}
    asha = short_lengths({"max_time": 100, "time_metric": "batches"}, {})
    assert asha[1] == {"max_time": 8, "time_metric": "batches"}
