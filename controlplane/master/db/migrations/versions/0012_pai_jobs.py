"""OpenPAI jobs, and commands, shells and notebooks run as one-task jobs; the job, role and index of tasks

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pai_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False, server_default="pai"),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("idle_timeout_s", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("code", sa.LargeBinary(), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("resource_pool", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=True),
        sa.Column("queue_position", sa.Float(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ssh_key", sa.Text(), nullable=False),
        sa.Column("ssh_host_key", sa.Text(), nullable=False),
        sa.Column("exit_reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "name"),
        sa.UniqueConstraint("job_id"),
    )
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("pai_job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("task_role", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("task_index", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_allocations_pai_job_id", "pai_jobs", ["pai_job_id"], ["id"], ondelete="CASCADE")
        batch.create_index("ix_allocations_pai_job_id", ["pai_job_id"])


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_index("ix_allocations_pai_job_id")
        batch.drop_constraint("fk_allocations_pai_job_id", type_="foreignkey")
        batch.drop_column("task_index")
        batch.drop_column("task_role")
        batch.drop_column("pai_job_id")
    op.drop_table("pai_jobs")
