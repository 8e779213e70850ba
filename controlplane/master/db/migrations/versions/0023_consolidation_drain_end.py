"""consolidation_moves.drain_ended_at: when the admin ended a consolidation drain by enabling the agent

Revision ID: 0023
Revises: 0022

An agent is "consolidating" (terminated by the autoscaler as soon as it is empty) only while the
drain consolidation started is in progress; enabling the agent ends it, so a later admin drain
(`det agent disable --drain`) keeps the agent. Moves off an agent that is not draining now belong
to drains already over: they get the migration's time. Moves off an agent draining now are taken
as consolidation's drain in progress.
"""
import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("consolidation_moves") as batch:
        batch.add_column(sa.Column("drain_ended_at", sa.DateTime(timezone=True), nullable=True))
    moves = sa.table("consolidation_moves", sa.column("instance_id", sa.String),
                     sa.column("drain_ended_at", sa.DateTime(timezone=True)))
    agents = sa.table("agents", sa.column("id", sa.String), sa.column("draining", sa.Boolean))
    draining_now = sa.select(agents.c.id).where(agents.c.draining.is_(True))
    op.execute(moves.update().where(moves.c.instance_id.not_in(draining_now))
               .values(drain_ended_at=sa.func.current_timestamp()))


def downgrade() -> None:
    with op.batch_alter_table("consolidation_moves") as batch:
        batch.drop_column("drain_ended_at")
