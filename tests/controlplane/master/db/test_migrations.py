"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from controlplane.master.db.engine import make_engine
from controlplane.master.db.migrate import upgrade_to_head
from controlplane.master.db.models import Base

pytestmark = pytest.mark.both_databases  # migrations and the schema they build are per dialect


async def test_migrations_match_the_models(db_url):
    engine = make_engine(db_url)
    try:
        await upgrade_to_head(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(lambda c: compare_metadata(MigrationContext.configure(c), Base.metadata))
    finally:
        await engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"


async def test_0010_counts_only_restarts_made(db_url):
    """A trial that errored after 2 failures with max_restarts 1 restarted once; others keep theirs."""
    from alembic import command
    from sqlalchemy import text

    from controlplane.master.db.migrate import alembic_config

    engine = make_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0009"))
            await conn.execute(text(
                "INSERT INTO users (id, username, password_hash, admin, active, role, created_at) VALUES "
                "(99, 'u', '', false, true, 'user', CURRENT_TIMESTAMP)"))
            await conn.execute(text(
                "INSERT INTO experiments (id, name, description, labels, state, config, original_config, owner_id, "
                "searcher_type, model_definition, context_hash, resource_pool, job_id, weight, queue_position, "
                "progress, archived, notes, start_time) VALUES (1, 'e', '', '[]', 'ERROR', '{}', '', 99, 'random', "
                "'', '', 'default', 'j', 1.0, 0, 0, false, '', CURRENT_TIMESTAMP)"))
            for tid, state, restarts in ((1, "ERROR", 2), (2, "COMPLETED", 1), (3, "RUNNING", 0), (4, "ERROR", 0)):
                await conn.execute(text(
                    "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, state, restarts, "
                    "run_id, total_batches, runner_state, progress, start_time) VALUES (:id, 1, 'r', :task, '{}', 0, "
                    ":state, :restarts, 1, 0, '', 0, CURRENT_TIMESTAMP)"),
                    {"id": tid, "task": f"t{tid}", "state": state, "restarts": restarts})
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0010"))
            rows = (await conn.execute(text("SELECT id, restarts FROM trials ORDER BY id"))).all()
    finally:
        await engine.dispose()
    assert [tuple(r) for r in rows] == [(1, 1), (2, 1), (3, 0), (4, 0)]


async def test_0015_gives_warm_started_trials_their_checkpoint(db_url):
    """Trials of experiments already naming a searcher.source_checkpoint_uuid (or source_trial_id: its
    latest completed checkpoint) get it as their warm start; others none."""
    import json

    from alembic import command
    from sqlalchemy import text

    from controlplane.master.db.migrate import alembic_config

    engine = make_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0014"))
            await conn.execute(text(
                "INSERT INTO users (id, username, password_hash, admin, active, role, created_at) VALUES "
                "(99, 'u', '', false, true, 'user', CURRENT_TIMESTAMP)"))
            searchers = {1: {}, 2: {"source_checkpoint_uuid": "ck-given"}, 3: {"source_trial_id": 1}}
            for exp_id, searcher in searchers.items():
                await conn.execute(text(
                    "INSERT INTO experiments (id, name, description, labels, state, config, original_config, "
                    "owner_id, searcher_type, model_definition, context_hash, resource_pool, job_id, weight, "
                    "queue_position, progress, archived, notes, start_time) VALUES (:id, 'e', '', '[]', 'ACTIVE', "
                    ":config, '', 99, 'single', '', '', 'default', :job, 1.0, 0, 0, false, '', CURRENT_TIMESTAMP)"),
                    {"id": exp_id, "job": f"j{exp_id}",
                     "config": json.dumps({"searcher": {"name": "single", **searcher}})})
                await conn.execute(text(
                    "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, state, restarts, "
                    "run_id, total_batches, runner_state, progress, start_time) VALUES (:id, :id, 'r', :task, '{}', "
                    "0, 'ACTIVE', 0, 1, 0, '', 0, CURRENT_TIMESTAMP)"), {"id": exp_id, "task": f"t{exp_id}"})
            for uuid, state, steps in (("ck-10", "STATE_COMPLETED", 10), ("ck-20", "STATE_COMPLETED", 20),
                                       ("ck-30", "STATE_DELETED", 30)):
                await conn.execute(text(
                    "INSERT INTO checkpoints (uuid, trial_id, experiment_id, task_id, allocation_id, state, "
                    "steps_completed, metadata, resources, size, storage, report_time, delete_reason, delete_error, "
                    "delete_attempts) VALUES (:uuid, 1, 1, 't1', 'a', :state, :steps, '{}', '{}', 0, '{}', "
                    "CURRENT_TIMESTAMP, '', '', 0)"), {"uuid": uuid, "state": state, "steps": steps})
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0015"))
            rows = (await conn.execute(text("SELECT id, warm_start_checkpoint FROM trials ORDER BY id"))).all()
    finally:
        await engine.dispose()
    assert [tuple(r) for r in rows] == [(1, None), (2, "ck-given"), (3, "ck-20")]


async def test_0017_backfills_summaries_and_moves_code(db_url):
    """An upgraded database answers as before: each trial's summary metrics aggregated from its
    reports (what the write path keeps from then on), every experiment's code in
    experiment_contexts, and the progress basis of a searcher this version can load."""
    import json

    from alembic import command
    from sqlalchemy import inspect, text
    from sqlalchemy.ext.asyncio import AsyncSession

    from controlplane.config.experiment import parse_experiment_config
    from controlplane.master.db.migrate import alembic_config
    from controlplane.master.services import metric_summaries
    from controlplane.searchers import make_searcher

    config = {"name": "e", "entrypoint": "python3 train.py", "hyperparameters": {},
              "searcher": {"name": "random", "metric": "loss", "max_trials": 3, "max_length": {"batches": 10}}}
    searcher = make_searcher(parse_experiment_config(config))
    first = searcher.initial_actions()[0]
    searcher.on_trial_exited(first.request_id, "completed")
    # Sums exact in binary: a sum's last bit may depend on the order of its terms (the database's
    # scan order before, the order of writes now).
    reports = [("training", 1, {"loss": 0.5, "acc": 1, "lr": 0.5, "phase": "warm"}),
               ("training", 2, {"loss": "NaN", "acc": 2, "lr": 0.25, "phase": 3}),
               ("training", 4, {"loss": 0.25, "acc": "Infinity", "lr": 0.125, "flag": True}),
               ("training", 3, {"loss": 0.75, "acc": 4, "xs": [1, 2], "none": None}),
               ("validation", 4, {"loss": 0.4}), ("custom", 2, {"x": -1})]
    engine = make_engine(db_url)
    postgres = engine.dialect.name == "postgresql"
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0016"))
            await conn.execute(text(
                "INSERT INTO users (id, username, password_hash, admin, active, role, created_at) VALUES "
                "(99, 'u', '', false, true, 'user', CURRENT_TIMESTAMP)"))
            states = {1: (config, {"searcher": searcher.snapshot()}), 2: ({"searcher": {"name": "retired"}},
                                                                         {"searcher": {}})}
            for exp_id, (cfg, state) in states.items():
                await conn.execute(text(
                    "INSERT INTO experiments (id, name, description, labels, state, config, original_config, "
                    "owner_id, searcher_type, searcher_state, model_definition, context_hash, resource_pool, job_id, "
                    "weight, queue_position, progress, archived, notes, start_time) VALUES (:id, 'e', '', '[]', "
                    "'ACTIVE', :config, '', 99, 'random', :state, :code, '', 'default', :job, 1.0, 0, 0, false, '', "
                    "CURRENT_TIMESTAMP)"),
                    {"id": exp_id, "job": f"j{exp_id}", "config": json.dumps(cfg), "state": json.dumps(state),
                     "code": f"code {exp_id}".encode()})
            for trial_id in (1, 2):
                await conn.execute(text(
                    "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, state, restarts, "
                    "run_id, total_batches, runner_state, progress, start_time) VALUES (:id, 1, 'r', :task, '{}', "
                    "0, 'ACTIVE', 0, 1, 0, '', 0, CURRENT_TIMESTAMP)"), {"id": trial_id, "task": f"t{trial_id}"})
            values = "CAST(:m AS json)" if postgres else ":m"
            for group, steps, metrics in reports:
                await conn.execute(text(
                    "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics, "
                    f"report_time) VALUES (1, 1, :g, :s, {values}, CURRENT_TIMESTAMP)"),
                    {"g": group, "s": steps, "m": json.dumps(metrics)})
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0017"))
            codes = dict((await conn.execute(text("SELECT experiment_id, model_definition FROM experiment_contexts")))
                         .all())
            columns = await conn.run_sync(lambda c: {col["name"] for col in inspect(c).get_columns("experiments")})
            bases = dict((await conn.execute(text("SELECT id, progress_basis FROM experiments"))).all())
        async with AsyncSession(engine) as session:
            summary = await metric_summaries.summary_metrics(session, 1)
            assert await metric_summaries.summary_metrics(session, 2) is None
            assert await metric_summaries.report_count(session, 1) == 6
            assert await metric_summaries.report_count(session, 1, ["training"]) == 4
    finally:
        await engine.dispose()
    assert {k: bytes(v) for k, v in codes.items()} == {1: b"code 1", 2: b"code 2"}
    assert "model_definition" not in columns
    as_json = {k: json.loads(v) if isinstance(v, str) else v for k, v in bases.items()}
    # No basis is backfilled (a migration may not run the searchers): both compute from their searcher
    # until it next changes (test_experiment_progress covers the fallback).
    assert as_json == {1: None, 2: None}
    # What the write path folds from the same reports (in id order, as they were inserted).
    groups: dict[str, metric_summaries.GroupSummary] = {}
    for row_id, (group, steps, metrics) in enumerate(reports, start=1):
        groups.setdefault(group, metric_summaries.GroupSummary()).add(row_id, steps, metrics)
    assert summary == {metric_summaries.summary_key(g): s.entries() for g, s in sorted(groups.items())}
    assert summary["avg_metrics"]["acc"] == {"type": "number", "count": 4, "min": 1.0, "max": "Infinity",
                                             "sum": "Infinity", "mean": "Infinity", "last": "Infinity"}
    assert summary["avg_metrics"]["phase"] == {"type": "string", "last": None}  # not in the newest (steps 4)
    assert summary["avg_metrics"]["none"] == {"type": "null", "last": None}


async def test_0022_counts_every_earlier_checkpoint_as_owning_its_files(db_url):
    """Every checkpoint before 0022 was published by the master (or uploaded by its trial): download,
    GC and `det checkpoint rm` keep acting on its files."""
    from alembic import command
    from sqlalchemy import text

    from controlplane.master.db.migrate import alembic_config

    engine = make_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0021"))
            await conn.execute(text(
                "INSERT INTO checkpoints (uuid, task_id, allocation_id, state, steps_completed, metadata, resources, "
                "size, storage, report_time, delete_reason, delete_error, delete_attempts) VALUES ('ck-old', 't', "
                "'a', 'STATE_COMPLETED', 1, '{}', '{}', 0, '{}', CURRENT_TIMESTAMP, '', '', 0)"))
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0022"))
            rows = (await conn.execute(text("SELECT uuid, owns_files FROM checkpoints"))).all()
    finally:
        await engine.dispose()
    assert [(u, bool(o)) for u, o in rows] == [("ck-old", True)]


async def test_0023_ends_the_consolidation_drains_of_agents_not_draining_now(db_url):
    """Moves off an agent the admin has since enabled (not draining) belong to a drain that is over:
    a later admin drain must not get it terminated as consolidation's. An agent draining now keeps
    its drain open."""
    from alembic import command
    from sqlalchemy import text

    from controlplane.master.db.migrate import alembic_config

    engine = make_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0022"))
            for agent_id, draining in (("i-enabled", False), ("i-draining", True)):
                await conn.execute(text(
                    "INSERT INTO agents (id, resource_pool, slots, addresses, version, connected, enabled, draining, "
                    "disabled_slots, registered_at, last_seen) VALUES (:id, 'gpu', '[]', '[]', '', true, true, "
                    ":draining, '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"), {"id": agent_id, "draining": draining})
            for n, agent_id in enumerate(("i-enabled", "i-draining", "i-gone")):
                await conn.execute(text(
                    "INSERT INTO consolidation_moves (id, pool, drain_id, instance_id, trial_id, allocation_id, "
                    "to_agent, reason, usd_per_hour, expected_saving_usd, created_at) VALUES (:n, 'gpu', 'd', :agent, "
                    ":n, 'a', 'i-other', 'r', 1.0, 1.0, CURRENT_TIMESTAMP)"), {"n": n + 1, "agent": agent_id})
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "0023"))
            rows = (await conn.execute(text(
                "SELECT instance_id, drain_ended_at FROM consolidation_moves ORDER BY id"))).all()
    finally:
        await engine.dispose()
    assert [(i, ended is not None) for i, ended in rows] == [("i-enabled", True), ("i-draining", False),
                                                             ("i-gone", True)]
