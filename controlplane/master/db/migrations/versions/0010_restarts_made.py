"""trials count the restarts made: the failure that ended a trial in ERROR is no longer one

Revision ID: 0010
Revises: 0009

Before, every failure counted, so a trial that failed past max_restarts showed one restart more
than it had (a trial with max_restarts 0 that failed once showed 1). ERROR is reached only that
way, so its rows come down by one; every other row already counts restarts made.
"""
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE trials SET restarts = restarts - 1 WHERE state = 'ERROR' AND restarts > 0")


def downgrade() -> None:
    op.execute("UPDATE trials SET restarts = restarts + 1 WHERE state = 'ERROR'")
