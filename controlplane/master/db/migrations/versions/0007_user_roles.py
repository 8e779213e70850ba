"""user roles: admin, user or viewer (read-only); existing admins keep their rights

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="user"))
    op.execute("UPDATE users SET role = 'admin' WHERE admin")


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("role")
