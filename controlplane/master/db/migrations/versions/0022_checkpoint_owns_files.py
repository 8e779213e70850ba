"""checkpoints.owns_files: whether the files at a checkpoint's place are its own to serve and delete

Revision ID: 0022
Revises: 0021

True where the master published them (a shared_fs checkpoint moved out of its allocation's staging
directory) or the trial uploaded them under a uuid no checkpoint had before (cloud storage); False
for a report with no files and for an announced (STATE_ACTIVE) shared_fs checkpoint, whose files
are still staged. Download, GC and ``det checkpoint rm`` never touch storage for a row without it.
Every row from before was published by the master: they get True.
"""
import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("owns_files", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("owns_files")
