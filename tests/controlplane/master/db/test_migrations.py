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
