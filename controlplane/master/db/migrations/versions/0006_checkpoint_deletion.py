"""checkpoint garbage collection: why a checkpoint is deleted and its last failure

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("delete_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("delete_error", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("delete_attempts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("delete_attempts")
        batch.drop_column("delete_error")
        batch.drop_column("delete_reason")
