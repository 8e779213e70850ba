"""Consolidation on a local cluster of real processes: `det deploy local up --autoscale` (the `local`
provider starts each instance as a det-agent process) with two 2-slot agents, each running one
1-slot trial. The autoscaler moves one trial onto the other agent's free slot (it checkpoints as on
a pause and resumes there from that checkpoint) and terminates the emptied agent, saying why."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.conftest import det, processes_mentioning
from tests.support.cluster import free_port, wait_for
from tests.support.rest_client import SignedInClient

# Both: the moves, their reasons and the "moved before" counts are rows read back through SQL
# (`consolidation_moves` joined to allocations and instances in one statement each tick).
pytestmark = [pytest.mark.e2e, pytest.mark.both_databases]

STEP_S = 0.1
# A trial that reports its training metrics every step, checks for preemption every step and, when
# preempted, checkpoints at that step and exits; a run with a checkpoint resumes from its step.
TRAIN = '''
import json
import pathlib
import time

from controlplane import core


def main():
    with core.init() as ctx:
        steps = 0
        latest = ctx.info.latest_checkpoint
        if latest:
            with ctx.checkpoint.restore_path(latest) as path:
                steps = json.loads((pathlib.Path(path) / "state.json").read_text())["steps"]
            print(f"resumed from checkpoint {latest} at step {steps}", flush=True)
        for op in ctx.searcher.operations():
            while steps < op.length:
                time.sleep(STEP_S)
                steps += 1
                ctx.train.report_training_metrics(steps, {"loss": 1.0 / steps})
                if ctx.preempt.should_preempt():
                    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _uuid):
                        (pathlib.Path(path) / "state.json").write_text(json.dumps({"steps": steps}))
                    print(f"preempted at step {steps}; checkpointed", flush=True)
                    return
            op.report_completed(1.0 / steps)


main()
'''.replace("STEP_S", repr(STEP_S))


class Api(SignedInClient):
    def pool(self) -> dict:
        return self.get("/api/v1/resource-pools/default/autoscaler")

    def trial(self, trial_id: int) -> dict:
        return self.get(f"/api/v1/trials/{trial_id}")["trial"]

    def trial_of(self, exp_id: int) -> dict | None:
        trials = self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"]
        return trials[0] if trials else None

    def running_on(self) -> dict[str, str]:
        """task id -> the agent its RUNNING allocation runs on."""
        out = {}
        for a in self.get("/api/v1/tasks")["allocationIdToSummary"].values():
            if a["state"] == "STATE_RUNNING":
                (agent,) = {ag for r in a["resources"] for ag in r["agentDevices"]}
                out[a["taskId"]] = agent
        return out

    def training_metrics(self, trial_id: int) -> list[dict]:
        rows, cursor = [], None
        while True:
            page = self.get(f"/api/v1/trials/{trial_id}/metrics?group=training&limit=1000"
                            + (f"&cursor={cursor}" if cursor else ""))
            rows += page["metrics"]
            cursor = page.get("nextCursor")
            if not cursor:
                return rows

    def connected_agents(self) -> set[str]:
        return {a["id"] for a in self.get("/api/v1/agents?all=true")["agents"] if a["connected"]}

    def checkpoints(self, trial_id: int) -> list[dict]:
        return self.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"]


def test_consolidation_moves_a_trial_off_an_underused_agent_and_terminates_it(tmp_path, db_url):
    data_dir = tmp_path / "auto"
    port = free_port()
    env = {"DET_MASTER": f"http://127.0.0.1:{port}", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    # The pool `--autoscale` makes, with consolidation quick to act: a trial may move once it has run
    # 5 s. The idle period is long, so the only way an agent goes is consolidation's.
    provider = {"type": "local", "instance_type": "local", "min_instances": 0, "max_instances": 2,
                "slots_per_instance": 2, "max_idle_agent_period": "10m", "max_agent_starting_period": "2m",
                "prices": {"local": 1.0},  # $1/h an agent, so that the move's saving is a number
                "consolidation": {"enabled": True, "max_moves_per_trial": 2, "move_cost": "1s", "min_runtime": "5s"}}
    config = tmp_path / "master.yaml"
    config.write_text(yaml.safe_dump({"db": {"url": db_url}, "preemption_timeout": "120s",
                                      "resource_pools": [{"pool_name": "default", "provider": provider}]}))
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text(TRAIN)
    exp_config = tmp_path / "exp.yaml"
    exp_config.write_text(yaml.safe_dump({
        "name": "consolidation", "entrypoint": "python3 train.py", "max_restarts": 0,
        "resources": {"slots_per_trial": 1},
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True,
                     "max_length": {"batches": 100_000}}}))
    try:
        det("deploy", "local", "up", "--autoscale", "--agents", "2", "--slots-per-agent", "2",
            "--port", str(port), "--data-dir", str(data_dir), "--master-config", str(config), env=env, timeout=120)
        api = Api(env["DET_MASTER"])

        def why() -> str:
            try:
                pool = json.dumps(api.pool(), indent=1)[:4000]
            except Exception as e:  # noqa: BLE001 - a diagnostic
                pool = f"(describe failed: {e})"
            log = data_dir / "logs" / "master.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else ""
            return f"pool:\n{pool}\n\nmaster log:\n{tail}"

        def create() -> int:
            return int(json.loads(det("experiment", "create", str(exp_config), str(context), "--json",
                                      env=env).stdout)["id"])

        def running(exp_id: int) -> tuple[dict, str] | None:
            t = api.trial_of(exp_id)
            agent = api.running_on().get(t["taskId"]) if t else None
            return (t, agent) if t and agent and api.training_metrics(t["id"]) else None

        try:
            # 1. One agent with a trial and a 1-slot command beside it (the filler), then a second
            #    agent for a second trial (the first one is full); then the filler goes: two agents,
            #    each using 1 of its 2 slots.
            filler = det("command", "run", "-d", "--config", "resources.slots=1", "sleep", "600",
                         env=env).stdout.strip().split()[-1]
            exp_a = create()
            first, agent_1 = wait_for(lambda: running(exp_a), 120, "the first trial to run and report", interval_s=0.5)
            # the filler's allocation (the one running task that is not the trial's) runs beside it
            wait_for(lambda: [a for task, a in api.running_on().items() if task != first["taskId"]] == [agent_1],
                     60, f"the filler command to run on {agent_1}", interval_s=0.5)
            exp_b = create()
            second, agent_2 = wait_for(lambda: running(exp_b), 120, "the second trial to run on a second agent",
                                       interval_s=0.5)
            assert agent_2 != agent_1
            det("command", "kill", filler, env=env)
            wait_for(lambda: set(api.running_on()) <= {first["taskId"], second["taskId"]}, 60,
                     "the filler command to end")
            trials = {first["id"]: agent_1, second["id"]: agent_2}

            # 2. The autoscaler moves one trial off its agent, and says why.
            def moved() -> dict | None:
                c = api.pool()["consolidation"]
                return c if c["moveCount"] >= 1 else None

            c = wait_for(moved, 90, "consolidation to move a trial", interval_s=0.5)
            assert c["enabled"] and c["moveCount"] == 1 and len(c["moves"]) == 1, c
            move = c["moves"][0]
            victim, src = move["trialId"], move["fromInstance"]
            assert victim in trials and src == trials[victim], (move, trials)
            dest = agent_2 if src == agent_1 else agent_1
            stayer = next(t for t in trials if t != victim)
            assert move["toAgent"] == dest, move
            assert move["reason"].startswith(f"consolidating: agent {src} uses 1 of 2 slots"), move
            assert "free slots" in move["reason"] and "terminating it saves $1.00/h" in move["reason"], move

            # 3. It checkpointed, resumed from that checkpoint on the other agent, and the emptied
            #    agent was terminated.
            def resumed() -> dict | None:
                t = api.trial(victim)
                on = api.running_on().get(t["taskId"])
                return t if t["runId"] >= 2 and on == dest and "resumed from checkpoint" in api.trial_logs(victim) \
                    else None

            t = wait_for(resumed, 120, "the moved trial to resume on the other agent", interval_s=0.5)
            assert t["runId"] == 2 and t["restarts"] == 0, t  # a move, not a failure
            still = api.trial(stayer)
            assert api.running_on().get(still["taskId"]) == dest and still["runId"] == 1, still  # both there now

            def terminated() -> dict | None:
                d = api.pool()
                rec = {i["id"]: i for i in d["instances"]}[src]
                return d if rec["state"] == "terminated" else None

            d = wait_for(terminated, 60, f"the emptied agent {src} to be terminated", interval_s=0.5)
            recs = {i["id"]: i for i in d["instances"]}
            assert "drained by consolidation" in recs[src]["reason"] and recs[src]["terminatedAt"], recs[src]
            assert recs[dest]["state"] != "terminated", recs[dest]
            # the drained instance is terminated: its drain's expected saving counts as saved
            assert d["consolidation"]["moveCount"] == 1 and d["consolidation"]["savedUsd"] > 0, d["consolidation"]
            wait_for(lambda: not processes_mentioning(str(data_dir / "local-agents" / src)), 30,
                     f"agent {src}'s processes to go with its instance")
            wait_for(lambda: src not in api.connected_agents(), 30, f"agent {src} to leave the cluster")

            # 4. No step lost: the first run stopped at the step of its checkpoint, and the second
            #    started right after it. Wait for the resumed run to report a few steps.
            ckpt_uuid = t["latestCheckpointUuid"]
            ckpt = next(c for c in api.checkpoints(victim) if c["uuid"] == ckpt_uuid)
            ckpt_step = ckpt["metadata"]["steps_completed"]
            wait_for(lambda: sum(1 for m in api.training_metrics(victim) if m["trialRunId"] == 2) >= 3, 60,
                     "the resumed run to report")
            rows = api.training_metrics(victim)
            steps = [m["stepsCompleted"] for m in rows]
            assert steps == list(range(1, len(steps) + 1)), steps  # every step once, none skipped
            runs = {run: [m["stepsCompleted"] for m in rows if m["trialRunId"] == run] for run in (1, 2)}
            assert runs[1] and runs[1][-1] == ckpt_step, (runs[1][-5:], ckpt_step)
            assert runs[2][0] == ckpt_step + 1, (runs[2][:5], ckpt_step)
            logs = api.trial_logs(victim)
            assert f"[autoscaler] moving this trial off agent {src}" in logs, logs[-3000:]
            assert f"preempted at step {ckpt_step}; checkpointed" in logs, logs[-3000:]
            assert f"resumed from checkpoint {ckpt_uuid} at step {ckpt_step}" in logs, logs[-3000:]
            assert "[autoscaler] moving this trial" not in api.trial_logs(stayer)

            # 5. `det resource-pool describe` shows the move and why, and the termination's reason.
            text = det("resource-pool", "describe", "default", env=env).stdout
            assert f"trial {victim} off {src} -> {dest}: {move['reason']}" in text, text
            assert "Consolidation: on, at most 2 moves per trial, move cost 1s" in text and "; 1 move, " in text, text
            assert f"agent {src} drained by consolidation and now empty; terminating" in text, text
        except AssertionError as e:
            raise AssertionError(f"{e}\n{why()}") from None

        # 6. Cleanup: the trials are killed; nothing moved again.
        for exp in (exp_a, exp_b):
            det("experiment", "kill", str(exp), env=env)
        for exp in (exp_a, exp_b):
            wait_for(lambda e=exp: api.get(f"/api/v1/experiments/{e}")["experiment"]["state"] == "STATE_CANCELED",
                     60, f"experiment {exp} to be killed", interval_s=0.5)
        assert api.pool()["consolidation"]["moveCount"] == 1
    finally:
        det("deploy", "local", "down", "--data-dir", str(data_dir), env=env, check=False, timeout=120)
    assert processes_mentioning(str(data_dir)) == []

