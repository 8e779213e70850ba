"""consolidation moves, and allocations that watch their preemption signal

The trials the autoscaler moved off underused instances, and which allocations watch their
preemption signal (declared they can be moved).

Revision ID: 0014
Revises: 0013
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "consolidation_moves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("drain_id", sa.String(length=32), nullable=False),
        sa.Column("instance_id", sa.String(length=255), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sa.String(length=160), nullable=False),
        sa.Column("to_agent", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("usd_per_hour", sa.Float(), nullable=False),
        sa.Column("expected_saving_usd", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_consolidation_moves_instance_id", "consolidation_moves", ["instance_id"])
    op.create_index("ix_consolidation_moves_trial_id", "consolidation_moves", ["trial_id"])
    op.create_index("ix_consolidation_moves_pool_created_at", "consolidation_moves", ["pool", "created_at"])
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("watches_preemption", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("watches_preemption")
    op.drop_index("ix_consolidation_moves_pool_created_at", table_name="consolidation_moves")
    op.drop_index("ix_consolidation_moves_trial_id", table_name="consolidation_moves")
    op.drop_index("ix_consolidation_moves_instance_id", table_name="consolidation_moves")
    op.drop_table("consolidation_moves")
