"""job-queue settings on experiments; gang resources on allocations

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("priority", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1.0"))
        batch_op.add_column(sa.Column("max_slots", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("queue_position", sa.Float(), nullable=False, server_default="0"))
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resources", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("killed_for_preemption", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_column("killed_for_preemption")
        batch_op.drop_column("resources")
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_column("queue_position")
        batch_op.drop_column("max_slots")
        batch_op.drop_column("weight")
        batch_op.drop_column("priority")
