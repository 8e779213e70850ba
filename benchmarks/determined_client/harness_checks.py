"""The ``harness`` group: Determined's own harness inside tasks, as its users run it (the Core API
tutorials 0-4 and the mnist_pytorch PyTorchTrial), submitted together in the order a user might."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.determined_client.cluster import Master, RealDet
from benchmarks.determined_client.scoreboard import Fail, Scoreboard, created_id, expect, one_line, wait_for
from benchmarks.determined_client.workloads import (
    MNIST_EPOCH_BATCHES,
    mnist_config,
    mnist_context,
    tutorial_config,
    tutorial_context,
)


def run_harness(board: Scoreboard, det: RealDet, master: Master, work: Path) -> None:
    g = "harness"
    E: dict[str, int] = {}
    notes: dict[str, str] = {}  # what went wrong while setting a scenario up, reported by its check
    out_dir = work / "harness-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    fs_root = work / "shared-fs-checkpoints"
    fs_root.mkdir(parents=True, exist_ok=True)

    def submit(key: str, config: Path, context: Path, *extra: str) -> None:
        try:
            E[key] = created_id(det("experiment", "create", str(config), str(context), *extra).stdout)
        except Fail as e:
            notes[key] = f"create failed: {e}"

    def exp(key: str) -> int:
        if key not in E:
            raise Fail(notes.get(key, f"experiment {key} was not created"))
        return E[key]

    def done(key: str, timeout_s: float = 900) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        exp_id = exp(key)
        e = master.wait_state(exp_id, ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"), timeout_s)
        trials = master.trials(exp_id)
        if e["state"] != "STATE_COMPLETED":
            logs = det("trial", "logs", str(trials[0]["id"]), "--tail", "40", ok=False).stdout if trials else ""
            errors = [line.split("||", 1)[-1] for line in logs.splitlines()
                      if re.search(r"\w+(Error|Exception)\b", line)]
            why = errors[-1] if errors else logs[-400:]
            raise Fail(f"experiment {exp_id} ended {e['state']} (run {trials[0].get('runId') if trials else '?'}): "
                       f"{one_line(why, 300)}")
        return e, trials

    def series(trial_id: int, group: str, metric: str) -> list[tuple[int, Any]]:
        return [(steps, m.get(metric)) for steps, m in master.metrics(trial_id, group) if metric in m]

    def logs(trial_id: int, *extra: str) -> str:
        return det("trial", "logs", str(trial_id), *extra, timeout=180).stdout

    def stored(trial_id: int) -> list[dict[str, Any]]:
        return master.checkpoints(trial_id)

    # Set-up, in queue order. Pause: stage 2 paused as soon as its trial runs, so the pause reaches the
    # script at its first preemption check (after its checkpoint at batch 10); activated once its
    # process has stopped. Cancel: another stage 2, canceled once it runs.
    submit("pause", tutorial_config(work, "2_checkpoints", "h-pause", name="h-pause"),
           tutorial_context(work, "2_checkpoints"))
    try:
        master.wait_running(exp("pause"), 300)
        det("experiment", "pause", str(E["pause"]))
    except Fail as e:
        notes["pause"] = f"pausing it: {e}"
    submit("cancel", tutorial_config(work, "2_checkpoints", "h-cancel", name="h-cancel"),
           tutorial_context(work, "2_checkpoints"))
    try:
        master.wait_running(exp("cancel"), 300)
        time.sleep(1.5)  # past its first checkpoint (batch 10)
        det("experiment", "cancel", str(E["cancel"]))
    except Fail as e:
        notes["cancel"] = f"canceling it: {e}"
    try:
        task_id = master.trials(exp("pause"))[0]["taskId"]
        wait_for(lambda: task_id not in master.live_task_ids(), 300, "the paused trial's process to stop")
        before = [c["metadata"].get("steps_completed") for c in stored(master.trials(E["pause"])[0]["id"])
                  if c["state"] == "STATE_COMPLETED"]
        if not before or max(before) >= 100:
            notes["pause"] = f"it stopped with checkpoints {before}, not mid-run"
        det("experiment", "activate", str(E["pause"]))
    except Fail as e:
        notes.setdefault("pause", f"pause/activate: {e}")

    submit("s0", tutorial_config(work, "0_start", "h-s0", name="h-stage-0"), tutorial_context(work, "0_start"))
    submit("s1", tutorial_config(work, "1_metrics", "h-s1", name="h-stage-1"), tutorial_context(work, "1_metrics"))
    submit("s2", tutorial_config(work, "2_checkpoints", "h-s2", name="h-stage-2"),
           tutorial_context(work, "2_checkpoints"))
    submit("fs", tutorial_config(work, "2_checkpoints", "h-fs", name="h-shared-fs",
                                 checkpoint_storage={"type": "shared_fs", "host_path": str(fs_root),
                                                     "storage_path": "score-storage", "save_experiment_best": 0,
                                                     "save_trial_best": 0, "save_trial_latest": 1}),
           tutorial_context(work, "2_checkpoints"))
    submit("s3", tutorial_config(work, "3_hpsearch", "h-s3", name="h-stage-3"), tutorial_context(work, "3_hpsearch"))
    # Determined's config asks for 8 slots; this cluster has two agents of two.
    submit("s4", tutorial_config(work, "4_distributed", "h-s4", name="h-stage-4", resources={"slots_per_trial": 4}),
           tutorial_context(work, "4_distributed"))
    submit("m1", mnist_config(work, "const", "h-m1"), mnist_context(work))
    submit("m2", mnist_config(work, "distributed", "h-m2", resources={"slots_per_trial": 2}), mnist_context(work))

    def check(name: str, fn: Callable[[], Any]) -> None:
        board.check(g, name, fn)

    def stage0() -> None:
        _, trials = done("s0")
        out = logs(trials[0]["id"])
        expect("x is now 100" in out and out.count("x is now ") == 100, f"{out.count('x is now ')} lines of x")
    check("core_api 0_start: an unmodified script runs to its end, its prints in the trial logs", stage0)

    def stage1_training() -> None:
        _, trials = done("s1")
        got = series(trials[0]["id"], "training", "x")
        expect(got == [(s, s) for s in range(10, 101, 10)], f"training x {got}")
    check("core_api 1_metrics: training metrics reach the master", stage1_training)

    def stage1_validation() -> None:
        e, trials = done("s1")
        got = series(trials[0]["id"], "validation", "x")
        expect(got == [(100, 100)], f"validation x {got}")
        expect(float(e.get("progress") or 0) == 1.0, f"experiment progress {e.get('progress')}")
    check("core_api 1_metrics: validation metric and report_progress", stage1_validation)

    def stage2_checkpoints() -> None:
        _, trials = done("s2")
        trial_id = trials[0]["id"]

        def collected() -> list[dict[str, Any]] | None:
            found = stored(trial_id)
            states = {c["state"] for c in found}
            return found if states <= {"STATE_COMPLETED", "STATE_DELETED"} and "STATE_DELETED" in states else None
        found = wait_for(collected, 180, "checkpoint GC to delete all but the latest")
        kept = [c for c in found if c["state"] == "STATE_COMPLETED"]
        expect([c["metadata"].get("steps_completed") for c in kept] == [100] and len(found) == 10,
               f"kept {[c['metadata'].get('steps_completed') for c in kept]} of {len(found)}")
        E["s2_trial"], notes["s2_kept"] = trial_id, kept[0]["uuid"]
        # Warm start (runs beside the rest): a new experiment naming that checkpoint as its source.
        submit("warm", tutorial_config(work, "2_checkpoints", "h-warm", name="h-warm-start"),
               tutorial_context(work, "2_checkpoints"),
               "--config", f"searcher.source_checkpoint_uuid={kept[0]['uuid']}")
    check("core_api 2_checkpoints: 10 checkpoints stored, GC keeps the latest", stage2_checkpoints)

    def stage2_download() -> None:
        kept = notes.get("s2_kept")
        expect(kept, "needs the kept checkpoint of the check above")
        target = out_dir / "s2-ckpt"
        det("checkpoint", "download", str(kept), "--output-dir", str(target), "--mode", "master")
        state = (target / "state").read_text() if (target / "state").exists() else "(no state file)"
        expect(state == f"100,100,{E['s2_trial']}", state)
    check("core_api 2_checkpoints: the kept checkpoint downloads with the script's state", stage2_download)

    def pause_resume() -> None:
        if "pause" in notes:
            raise Fail(notes["pause"])
        _, trials = done("pause")
        out = logs(trials[0]["id"])
        expect(out.count("x is now 1\n") == 1, "the resumed run started over instead of from its checkpoint")
        expect("x is now 100" in out and int(trials[0].get("runId") or 0) >= 2, f"runId {trials[0].get('runId')}")
    check("core_api 2_checkpoints: paused mid-run, resumed from its checkpoint", pause_resume)

    def cancel() -> None:
        if "cancel" in notes:
            raise Fail(notes["cancel"])
        e = master.wait_state(exp("cancel"), ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"), 600)
        trial = master.trials(E["cancel"])[0]
        expect(e["state"] == "STATE_CANCELED" and trial["state"] == "STATE_CANCELED",
               f"{e['state']} / {trial['state']}")
        expect(any(c["state"] in ("STATE_COMPLETED", "STATE_DELETED") for c in stored(trial["id"])),
               "no checkpoint stored")
        out = logs(trial["id"])
        expect("[master] killed" not in out and "x is now 100" not in out, one_line(out[-300:]))
    check("core_api 2_checkpoints: canceled mid-run, it stops at its next boundary (no kill)", cancel)

    def shared_fs() -> None:
        _, trials = done("fs")
        kept = [c for c in stored(trials[0]["id"]) if c["state"] == "STATE_COMPLETED"]
        expect(kept, "no completed checkpoint")
        path = fs_root / "score-storage" / kept[-1]["uuid"] / "state"
        expect(path.is_file() and path.read_text().startswith("100,100,"),
               f"{path} missing; under {fs_root}: {[str(p.relative_to(fs_root)) for p in fs_root.rglob('*')][:6]}")
    check("core_api 2_checkpoints: checkpoints in a shared_fs host_path/storage_path of the config", shared_fs)

    def asha_early() -> None:
        _, trials = done("s3")
        expect(len(trials) == 10 and all(t["state"] == "STATE_COMPLETED" for t in trials),
               f"{len(trials)} trials: {[t['state'] for t in trials]}")
        lengths = sorted(int(t["totalBatchesProcessed"]) for t in trials)
        expect(lengths[-1] == 100 and lengths[0] < 100, f"no trial was stopped early: {lengths}")
    check("core_api 3_hpsearch: adaptive_asha stops trials early", asha_early)

    def asha_hparams() -> None:
        _, trials = done("s3")
        for t in trials:
            got = series(t["id"], "validation", "x")
            want = (int(t["totalBatchesProcessed"]), t["hparams"]["increment_by"] * int(t["totalBatchesProcessed"]))
            expect(got and tuple(got[-1]) == want, f"trial {t['id']}: validations {got}, expected last {want}")
    check("core_api 3_hpsearch: each trial's hyperparameter reaches its script", asha_hparams)

    def distributed() -> None:
        _, trials = done("s4")
        t = trials[0]
        step = 4 * t["hparams"]["increment_by"]
        got = series(t["id"], "training", "x")
        expect(got == [(s, s * step) for s in range(10, 101, 10)], f"training x {got} (step {step})")
    check("core_api 4_distributed: 4 workers over two agents, allgather", distributed)

    def distributed_ranks() -> None:
        _, trials = done("s4")
        t = trials[0]
        for rank in range(4):
            out = logs(t["id"], "--rank-id", str(rank))
            expect("worker starting" in out, f"rank {rank}: {one_line(out[-200:])}")
        expect(float(t.get("progress") or 0) == 1.0, f"trial progress {t.get('progress')}")
    check("core_api 4_distributed: each rank's logs (--rank-id), the chief's progress", distributed_ranks)

    def mnist_one() -> None:
        _, trials = done("m1")
        t = trials[0]
        expect(int(t["totalBatchesProcessed"]) == MNIST_EPOCH_BATCHES, f"batches {t['totalBatchesProcessed']}")
        train = series(t["id"], "training", "loss")
        val = master.metrics(t["id"], "validation")
        expect(train and train[-1][0] == MNIST_EPOCH_BATCHES, f"training loss {train}")
        expect(val and val[-1][0] == MNIST_EPOCH_BATCHES and {"validation_loss", "accuracy"} <= set(val[-1][1]),
               f"validations {val}")
    check("mnist_pytorch: PyTorchTrial (Trainer, --epochs 1) on 1 slot", mnist_one)

    def mnist_checkpoint() -> None:
        _, trials = done("m1")
        kept = [c for c in stored(trials[0]["id"]) if c["state"] == "STATE_COMPLETED"]
        expect(kept, "no completed checkpoint")
        target = out_dir / "mnist-ckpt"
        det("checkpoint", "download", kept[-1]["uuid"], "--output-dir", str(target), "--mode", "master")
        expect((target / "state_dict.pth").is_file() and (target / "load_data.json").is_file(),
               f"downloaded {sorted(p.name for p in target.iterdir())}")
    check("mnist_pytorch: its checkpoint (Trainer layout) downloads through the master", mnist_checkpoint)

    def mnist_two() -> None:
        _, trials = done("m2")
        t = trials[0]
        expect(int(t["totalBatchesProcessed"]) == MNIST_EPOCH_BATCHES, f"batches {t['totalBatchesProcessed']}")
        val = master.metrics(t["id"], "validation")
        expect(val and "validation_loss" in val[-1][1], f"validations {val}")
        for rank in (0, 1):
            expect(logs(t["id"], "--rank-id", str(rank)).strip(), f"no log lines of rank {rank}")
    check("mnist_pytorch: PyTorchTrial on 2 slots (determined.launch.torch_distributed)", mnist_two)

    def warm_start() -> None:
        _, trials = done("warm")
        t = trials[0]
        expect(t.get("warmStartCheckpointUuid") == notes.get("s2_kept"),
               f"warmStartCheckpointUuid {t.get('warmStartCheckpointUuid')}")
        out = logs(t["id"])
        expect("x is now 101\n" in out and "x is now 1\n" not in out, one_line(out[-300:]))
        expect(series(t["id"], "validation", "x") == [(100, 200)], f"validation {series(t['id'], 'validation', 'x')}")
    check("core_api 2_checkpoints: warm start from another trial's checkpoint", warm_start)
