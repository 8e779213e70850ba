"""trials.warm_start_checkpoint, the checkpoint a trial's first run starts from

Its experiment's searcher.source_checkpoint_uuid, or the latest of searcher.source_trial_id;
Determined's trials.warm_start_checkpoint_id.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("warm_start_checkpoint", sa.String(length=64), nullable=True))
    _backfill()


def _backfill() -> None:
    """The trials of experiments already warm-starting get the checkpoint their runs ought to start
    from (a searcher.source_trial_id: that trial's latest completed checkpoint)."""
    bind = op.get_bind()
    experiments = sa.table("experiments", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
    trials = sa.table("trials", sa.column("experiment_id", sa.Integer),
                      sa.column("warm_start_checkpoint", sa.String))
    checkpoints = sa.table("checkpoints", sa.column("uuid", sa.String), sa.column("trial_id", sa.Integer),
                           sa.column("state", sa.String), sa.column("steps_completed", sa.BigInteger))
    for exp_id, config in bind.execute(sa.select(experiments.c.id, experiments.c.config)).all():
        searcher = config.get("searcher") if isinstance(config, dict) else None
        if not isinstance(searcher, dict):
            continue
        source, source_trial = searcher.get("source_checkpoint_uuid"), searcher.get("source_trial_id")
        if isinstance(source_trial, int) and not isinstance(source_trial, bool):
            source = bind.scalar(sa.select(checkpoints.c.uuid).where(
                checkpoints.c.trial_id == source_trial, checkpoints.c.state == "STATE_COMPLETED")
                .order_by(checkpoints.c.steps_completed.desc()).limit(1))
        if isinstance(source, str) and source:
            bind.execute(trials.update().where(trials.c.experiment_id == exp_id).values(warm_start_checkpoint=source))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("warm_start_checkpoint")
