"""one row per metric report: (trial, run, group, step) is unique

A client that retries a report whose 200 was lost (a master killed mid-response) must not
store it twice.

Revision ID: 0002
Revises: 0001
"""
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index("uq_metrics_report", ["trial_id", "trial_run_id", "metric_group", "steps_completed"],
                              unique=True)


def downgrade() -> None:
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.drop_index("uq_metrics_report")
