"""pai_output_sets, pai_output_files: what OpenPAI tasks left in $PAI_OUTPUT_DIR, kept in checkpoint storage

One set per task of an attempt (where it was stored, how much, what its agent left out) and one row
per kept file, keyed so that a page of a job's outputs is one index range.

Revision ID: 0020
Revises: 0018
"""
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None



def _key() -> list[sa.Column[Any]]:
    return [
        sa.Column("pai_job_id", sa.Integer(), sa.ForeignKey("pai_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("task_role", sa.String(64), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "pai_output_sets",
        *_key(),
        sa.Column("storage", sa.JSON(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("left_out", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("pai_job_id", "attempt", "task_role", "task_index"),
    )
    op.create_table(
        "pai_output_files",
        *_key(),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("pai_job_id", "attempt", "task_role", "task_index", "path"),
    )


def downgrade() -> None:
    op.drop_table("pai_output_files")
    op.drop_table("pai_output_sets")
