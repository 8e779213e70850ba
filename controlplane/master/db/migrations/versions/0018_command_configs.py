"""pai_jobs.config: a command's, shell's, notebook's or TensorBoard's config as launched

Determined's answers for these (launch and get) carry the config they run with; it is kept as
launched (a template merged under it). Rows from before this revision have none: their answers
rebuild what the job JSON says (``services/commands.py``).

Revision ID: 0018
Revises: 0017
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pai_jobs") as batch:
        batch.add_column(sa.Column("config", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pai_jobs") as batch:
        batch.drop_column("config")
