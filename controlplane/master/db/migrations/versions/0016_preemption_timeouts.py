"""allocations: preemption reason, deadline and the experiment's preemption_timeout

Why a preemption was asked for, its deadline, and the experiment's own preemption_timeout
(experiment > pool > master, Determined's precedence).

Allocations asked to stop before this revision get no deadline here: the master gives them its
own timeout from preempt_requested_at (orchestrator._enforce_preemption_timeouts).

Revision ID: 0016
Revises: 0015
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("preempt_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("preempt_deadline", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("preemption_timeout_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("preemption_timeout_s")
        batch.drop_column("preempt_deadline")
        batch.drop_column("preempt_reason")
