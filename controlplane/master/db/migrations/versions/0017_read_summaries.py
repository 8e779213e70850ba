"""trial_metric_summaries, experiments.progress_basis and experiment_contexts: reads that do not grow

A trial's summary metrics per group (reports, the newest report, per metric its kinds and
count/min/max/sum), which the metric write path now updates in the transaction that stores the
rows; what an experiment's progress is computed from without rebuilding its searcher, which
every searcher snapshot now writes; each experiment's code (model_definition) moved out of
experiments into experiment_contexts, so no read of experiments walks an archive's pages; and an
index that counts the lists' archived/project filter without reading every experiment and gives
their default order (newest first) without a sort.

Backfill: existing trials' summaries are aggregated from their reports, a batch of trials at a
time, as the read computed them before; experiments with a searcher snapshot get their basis from
it (one that this version cannot load keeps none: its progress is computed as before).

Revision ID: 0017
Revises: 0016
"""
import logging
import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

TRIALS_PER_BATCH = 100
EXPERIMENTS_PER_BATCH = 200
MAX_NAMES = 10_000  # metric names of one group's summary (services/metric_summaries.MAX_NAMES)
KIND_BITS = {"number": 1, "string": 2, "boolean": 4, "null": 8, "array": 16, "object": 32}
SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# What metric_reads.summary_metrics computed per read until this revision, for a batch of trials.
_SQLITE = """
SELECT m.trial_id AS trial, m.metric_group AS grp, j.key AS name,
       CASE j.type WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' WHEN 'text' THEN 'string'
                   WHEN 'true' THEN 'boolean' WHEN 'false' THEN 'boolean' ELSE j.type END AS kind,
       CASE WHEN j.type = 'text' AND j.value IN ('NaN', 'Infinity', '-Infinity') THEN j.value END AS special,
       count(*) AS n,
       min(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS lo,
       max(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS hi,
       sum(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS total
FROM metrics AS m, json_each(m.metrics) AS j
WHERE m.trial_id IN :trials
GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3
"""
_POSTGRES = """
SELECT m.trial_id AS trial, m.metric_group AS grp, kv.key AS name, json_typeof(kv.value) AS kind,
       CASE WHEN json_typeof(kv.value) = 'string' AND (kv.value #>> '{}') IN ('NaN', 'Infinity', '-Infinity')
            THEN kv.value #>> '{}' END AS special,
       count(*) AS n,
       min(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS lo,
       max(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS hi,
       sum(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS total
FROM metrics AS m, json_each(m.metrics) AS kv
WHERE m.trial_id IN :trials
GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3
"""


def upgrade() -> None:
    op.create_table(
        "experiment_contexts",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("model_definition", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.execute("INSERT INTO experiment_contexts (experiment_id, model_definition) "
                "SELECT id, model_definition FROM experiments")
    # SQLite's own DROP COLUMN (3.35+), never batch mode's copy of the table: dropping the old table
    # with foreign keys on would delete every trial (ON DELETE CASCADE).
    op.execute("ALTER TABLE experiments DROP COLUMN model_definition")
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("progress_basis", sa.JSON(), nullable=True))
    op.create_index("ix_experiments_archived_id", "experiments", ["archived", "id", "project_id"])
    op.create_table(
        "trial_metric_summaries",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("metric_group", sa.String(length=64), nullable=False),
        sa.Column("reports", sa.BigInteger(), nullable=False),
        sa.Column("last_steps", sa.BigInteger(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("last_metrics", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", "metric_group"),
    )
    _backfill_summaries()
    # Progress bases are not backfilled: a migration may not run the searchers (a layer above the
    # database). An open experiment without one is computed from its searcher, as before, until its
    # searcher next changes and stores its basis.


def _encode(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _fold(a: float, b: float, pick: Any) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else pick(a, b)


def _backfill_summaries() -> None:
    bind = op.get_bind()
    sql = sa.text(_POSTGRES if bind.dialect.name == "postgresql" else _SQLITE).bindparams(
        sa.bindparam("trials", expanding=True))
    metrics = sa.table("metrics", sa.column("id", sa.BigInteger), sa.column("trial_id", sa.Integer),
                       sa.column("metric_group", sa.String), sa.column("steps_completed", sa.BigInteger),
                       sa.column("metrics", sa.JSON))
    summaries = sa.table("trial_metric_summaries", sa.column("trial_id", sa.Integer),
                         sa.column("metric_group", sa.String), sa.column("reports", sa.BigInteger),
                         sa.column("last_steps", sa.BigInteger), sa.column("last_id", sa.BigInteger),
                         sa.column("last_metrics", sa.JSON), sa.column("metrics", sa.JSON))
    after = 0
    while True:
        trials = list(bind.scalars(sa.text("SELECT id FROM trials WHERE id > :after ORDER BY id LIMIT :n"),
                                   {"after": after, "n": TRIALS_PER_BATCH}).all())
        if not trials:
            return
        after = trials[-1]
        # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
        counts: Sequence[Any] = bind.execute(sa.select(metrics.c.trial_id, metrics.c.metric_group, sa.func.count())
                              .where(metrics.c.trial_id.in_(trials))
                              .group_by(metrics.c.trial_id, metrics.c.metric_group)).all()
        accs: dict[tuple[int, str], dict[str, list[Any]]] = {(t, g): {} for t, g, _ in counts}
        aggregates: Sequence[Any] = bind.execute(sql, {"trials": trials}).all()
        for trial, grp, name, kind, special, n, lo, hi, total in aggregates:
            names = accs.setdefault((trial, grp), {})
            acc = names.get(name)
            if acc is None:
                if len(names) >= MAX_NAMES:
                    continue
                acc = names[name] = [0, 0, math.inf, -math.inf, 0.0]
            if special is not None:
                lo = hi = SPECIALS[special]
                total = SPECIALS[special] * n
                kind = "number"
            acc[0] |= KIND_BITS.get(kind, KIND_BITS["string"])
            if kind != "number" or lo is None:
                continue
            acc[1] += n
            acc[2], acc[3] = _fold(acc[2], float(lo), min), _fold(acc[3], float(hi), max)
            acc[4] += float(total)
        rows = []
        for trial, grp, n in counts:
            newest = bind.execute(sa.select(metrics.c.id, metrics.c.steps_completed, metrics.c.metrics)
                                  .where(metrics.c.trial_id == trial, metrics.c.metric_group == grp)
                                  .order_by(metrics.c.steps_completed.desc(), metrics.c.id.desc()).limit(1)).one()
            rows.append({"trial_id": trial, "metric_group": grp, "reports": n, "last_steps": newest[1],
                         "last_id": newest[0], "last_metrics": newest[2] if isinstance(newest[2], dict) else {},
                         "metrics": {name: [a[0], a[1], _encode(a[2]), _encode(a[3]), _encode(a[4])]
                                     for name, a in accs[(trial, grp)].items()}})
        if rows:
            bind.execute(summaries.insert(), rows)


def downgrade() -> None:
    op.drop_table("trial_metric_summaries")
    op.drop_index("ix_experiments_archived_id", table_name="experiments")
    op.execute("ALTER TABLE experiments DROP COLUMN progress_basis")
    op.execute("ALTER TABLE experiments ADD COLUMN model_definition BYTEA NOT NULL DEFAULT ''"
               if op.get_bind().dialect.name == "postgresql" else
               "ALTER TABLE experiments ADD COLUMN model_definition BLOB NOT NULL DEFAULT x''")
    op.execute("UPDATE experiments SET model_definition = coalesce((SELECT c.model_definition "
               "FROM experiment_contexts AS c WHERE c.experiment_id = experiments.id), model_definition)")
    op.drop_table("experiment_contexts")
