"""task_logs: an index on (task_id, id) for a task's own lines

Commands, notebooks, OpenPAI tasks and Determined's /api/v1/tasks/{id}/logs read a task's lines by
task id, newest or after an id: without the index each read scanned the log table back to them.

Revision ID: 0021
Revises: 0020
"""
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_task_logs_task_id_id", "task_logs", ["task_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_task_logs_task_id_id", table_name="task_logs")
