"""instances launched by the autoscaler, with their cost inputs

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("instance_type", sa.String(length=128), nullable=False),
        sa.Column("zone", sa.String(length=128), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("launch_request_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("terminated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_instances_pool", "instances", ["pool"])


def downgrade() -> None:
    op.drop_index("ix_instances_pool", table_name="instances")
    op.drop_table("instances")
