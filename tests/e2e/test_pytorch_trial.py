"""The Trial API on a real cluster: examples/pytorch_trial (a PyTorchTrial, torch on CPU, gloo) trained
by four workers over two 2-slot agents through launchers.torch_distributed --trial, paused mid-run
and resumed from its checkpoint without losing or redoing a batch, the four workers agreeing on
the final weights; and the same context unchanged on one and two slots."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import requests

from tests.support.cluster import login, wait_for

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch_trial"
SCHEDULING_UNIT = 16  # distributed.yaml: training metrics every 16 batches
EPOCH = 64  # records_per_epoch 2048 / global_batch_size 32
EPOCHS = 8
WEIGHTS = re.compile(r"\[rank=(\d)\] \|\| \w+: \[weights\] rank=(\d) (checkpoint|end) batches=(\d+) digest=(\w+)")


def _session(url: str) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(url)}"
    return s


# Appended to the pause test's copy of model_def.py: in the run that is paused (it has no checkpoint to
# resume from) every batch takes at least 50 ms, so the run lasts tens of seconds after its first
# checkpoint however fast the machine, and the pause, which needs a CLI call and a preemption poll,
# always lands mid-run. The resumed run (it restores from the pause's checkpoint) has no pause to wait
# for and trains the rest at full speed: nothing the test checks depends on how fast it trains.
SLOW_BATCHES = """
import time as _time

from controlplane import core as _core

_train_batch = SyntheticTrial.train_batch
_info = _core.get_cluster_info()


def _slow_train_batch(self, *args, **kwargs):
    _time.sleep(0.05)
    return _train_batch(self, *args, **kwargs)


if _info is None or not _info.latest_checkpoint:
    SyntheticTrial.train_batch = _slow_train_batch
"""


def _context(tmp_path: Path, *, slow: bool = False) -> Path:
    context = tmp_path / "pytorch_trial"
    shutil.copytree(EXAMPLE, context)
    if slow:
        with (context / "model_def.py").open("a") as f:
            f.write(SLOW_BATCHES)
    return context


def _create(cluster, context: Path, *overrides: str) -> int:
    args = [arg for o in overrides for arg in ("--config", o)]
    return json.loads(cluster.det("experiment", "create", str(context / "distributed.yaml"), str(context), "--json",
                                  *args).stdout)["id"]


def _trial(s: requests.Session, url: str, exp_id: int) -> dict | None:
    trials = s.get(f"{url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
    return trials[0] if trials else None


def _busy_slots(s: requests.Session, url: str) -> int:
    agents = s.get(f"{url}/api/v1/agents").json()["agents"]
    return sum(1 for a in agents for slot in a["slots"].values() if slot.get("container"))


def _steps(s: requests.Session, url: str, trial_id: int, group: str) -> list[int]:
    metrics = s.get(f"{url}/api/v1/trials/{trial_id}/metrics", params={"group": group}).json()["metrics"]
    return sorted(m["stepsCompleted"] for m in metrics)


def _final_digests(logs: str, batches: int) -> dict[int, str]:
    """{rank: digest} of each worker's last '[weights] ... end' line, which must be at ``batches``."""
    ends = {}
    for prefix, rank, when, at, digest in WEIGHTS.findall(logs):
        assert prefix == rank
        if when == "end":
            ends[int(rank)] = (int(at), digest)
    assert all(at == batches for at, _ in ends.values()), ends
    return {rank: digest for rank, (_, digest) in ends.items()}


@pytest.mark.timeout(1500)  # the sum of its own waits
def test_four_workers_over_two_agents_pause_and_resume_without_lost_batches(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=2)
    s = _session(cluster.url)
    context = _context(tmp_path, slow=True)
    exp_id = _create(cluster, context, f"searcher.max_length.epochs={EPOCHS}")  # a checkpoint every 50 batches

    trial = wait_for(lambda: (t := _trial(s, cluster.url, exp_id)) and t.get("latestCheckpointUuid") and t, 300,
                     "the first checkpoint of the 4-worker trial")
    cluster.det("experiment", "pause", str(exp_id))
    # PAUSED is recorded when the pause is asked for; the workers stop (and checkpoint) at their next
    # batch, so read where they stopped once their slots are free again.
    wait_for(lambda: _trial(s, cluster.url, exp_id)["state"] == "STATE_PAUSED" and not _busy_slots(s, cluster.url),
             300, "the trial to pause and its workers to exit")
    paused = _trial(s, cluster.url, exp_id)
    stopped_at = paused["totalBatchesProcessed"]
    assert 0 < stopped_at < EPOCHS * EPOCH, paused
    cluster.det("experiment", "activate", str(exp_id))
    cluster.det("experiment", "wait", str(exp_id), timeout=900)

    trial = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert trial["state"] == "STATE_COMPLETED" and trial["restarts"] == 0, logs[-4000:]
    assert trial["totalBatchesProcessed"] == EPOCHS * EPOCH
    # Every reporting period and every epoch's validation once: nothing lost, nothing trained twice.
    assert _steps(s, cluster.url, trial["id"], "training") == list(range(SCHEDULING_UNIT, EPOCHS * EPOCH + 1,
                                                                           SCHEDULING_UNIT)), logs[-4000:]
    assert _steps(s, cluster.url, trial["id"], "validation") == [e * EPOCH for e in range(1, EPOCHS + 1)]
    # The pause checkpointed at the batch where every worker stopped, and the second run started there.
    ckpts = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}/checkpoints").json()["checkpoints"]
    steps = [c["metadata"]["steps_completed"] for c in ckpts]
    assert stopped_at in steps, (stopped_at, steps)
    stops = Counter((int(r), int(at)) for _p, r, when, at, _d in WEIGHTS.findall(logs) if when == "end")
    assert {rank for rank, at in stops if at == stopped_at} == {0, 1, 2, 3}, stops
    assert "restoring the trial from checkpoint" in logs
    # Four workers on two agents, one set of weights.
    digests = _final_digests(logs, EPOCHS * EPOCH)
    assert sorted(digests) == [0, 1, 2, 3] and len(set(digests.values())) == 1, digests
    ranks_on = {m.group(1) for m in re.finditer(r"\[rank=(\d)\]", logs)}
    assert ranks_on == {"0", "1", "2", "3"}


@pytest.mark.timeout(1800)  # three experiments of up to 600 s each
def test_the_same_context_on_one_and_two_slots(local_cluster, tmp_path):
    """distributed.yaml with slots_per_trial 1 and 2, and const.yaml's legacy ``model_def:SyntheticTrial``
    entrypoint on two slots (the agent runs it under the torch launcher)."""
    cluster = local_cluster(agents=1, slots=2)
    s = _session(cluster.url)
    context = _context(tmp_path)
    runs = []
    for slots in (1, 2):
        exp_id = _create(cluster, context, f"resources.slots_per_trial={slots}", "searcher.max_length.epochs=1")
        cluster.det("experiment", "wait", str(exp_id), timeout=600, check=False)
        runs.append((exp_id, slots, EPOCH, [EPOCH]))
    legacy = json.loads(cluster.det(
        "experiment", "create", str(context / "const.yaml"), str(context), "--json", "--config",
        "resources.slots_per_trial=2", "--config", "searcher.max_length.batches=64", "--config",
        "min_validation_period.batches=32").stdout)["id"]
    cluster.det("experiment", "wait", str(legacy), timeout=600, check=False)
    runs.append((legacy, 2, 64, [32, 64]))
    for exp_id, slots, batches, validations in runs:
        trial = _trial(s, cluster.url, exp_id)
        logs = cluster.det("trial", "logs", str(trial["id"])).stdout
        assert trial["state"] == "STATE_COMPLETED", logs[-4000:]
        assert _steps(s, cluster.url, trial["id"], "validation") == validations
        digests = _final_digests(logs, batches)
        assert sorted(digests) == list(range(slots)) and len(set(digests.values())) == 1, digests
