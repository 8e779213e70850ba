"""trials remember the steps of their best validation, so trial answers read it by index

Revision ID: 0008
Revises: 0007

Existing trials are backfilled once here, with the ranking the answers used before: the first
validation (in step order) whose searcher metric is strictly better than every earlier one.
"""
import json
import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _value(metrics: Any, name: str) -> Any:
    if isinstance(metrics, str):
        metrics = json.loads(metrics)
    v = (metrics or {}).get(name)
    v = _NONFINITE.get(v, v) if isinstance(v, str) else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v)


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("best_validation_steps", sa.BigInteger(), nullable=True))
    backfill(op.get_bind())


def backfill(conn: sa.Connection) -> None:
    """Sets best_validation_steps of every trial with a searcher metric but no steps recorded."""
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    trials: Sequence[Any] = conn.execute(sa.text(
        "SELECT t.id, e.config FROM trials t JOIN experiments e ON e.id = t.experiment_id "
        "WHERE t.searcher_metric_value IS NOT NULL AND t.best_validation_steps IS NULL")).all()
    for trial_id, config in trials:
        config = json.loads(config) if isinstance(config, str) else (config or {})
        searcher = config.get("searcher") or {}
        name, smaller = searcher.get("metric", ""), bool(searcher.get("smaller_is_better", True))
        best = best_steps = None
        rows = conn.execute(sa.text(
            "SELECT steps_completed, metrics FROM metrics WHERE trial_id = :t AND metric_group = 'validation' "
            "ORDER BY steps_completed, id"), {"t": trial_id})
        for steps, metrics in rows:
            v = _value(metrics, name)
            if v is not None and (best is None or (v < best if smaller else v > best)):
                best, best_steps = v, steps
        if best_steps is not None:
            conn.execute(sa.text("UPDATE trials SET best_validation_steps = :s WHERE id = :t"),
                         {"s": best_steps, "t": trial_id})


def downgrade() -> None:
    # On SQLite dropping a column recreates the table, and with foreign keys on that cascades to
    # the trial's metrics: a downgrade is for empty databases only.
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("best_validation_steps")
