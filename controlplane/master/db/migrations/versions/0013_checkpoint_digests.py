"""checkpoints carry a sha256 per file, which download and restore verify

Revision ID: 0013
Revises: 0012

NULL for checkpoints reported before (and for those whose storage gave none): they are not verified.
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("digests", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("digests")
