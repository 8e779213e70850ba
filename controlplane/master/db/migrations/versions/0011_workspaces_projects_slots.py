"""workspaces and projects (Determined's Uncategorized, id 1), experiments' projects, disabled slots

Revision ID: 0011
Revises: 0010

Determined's defaults, workspace and project ``Uncategorized``, both take id 1. Experiments that
exist already belong to the default project. The default rows are owned by nobody here: the
master sets their owner to ``admin`` at start, once the default users exist.
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("name_key", sa.String(length=80), nullable=False),  # lower-cased: Determined's names
        sa.Column("owner_id", sa.Integer(), nullable=True),                # are unique regardless of case
        sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("immutable", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name_key"),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("key", sa.String(length=5), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("immutable", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workspace_id", "name"),
        sa.UniqueConstraint("key"),
    )
    op.create_index("ix_projects_workspace_id", "projects", ["workspace_id"])
    now = sa.func.current_timestamp()
    op.execute(sa.table("workspaces", sa.column("id"), sa.column("name"), sa.column("name_key"),
                        sa.column("immutable"), sa.column("created_at"))
               .insert().values(id=1, name="Uncategorized", name_key="uncategorized", immutable=True, created_at=now))
    op.execute(sa.table("projects", sa.column("id"), sa.column("name"), sa.column("workspace_id"),
                        sa.column("key"), sa.column("immutable"), sa.column("created_at"))
               .insert().values(id=1, name="Uncategorized", workspace_id=1, key="UNCAT", immutable=True,
                                created_at=now))
    if op.get_bind().dialect.name == "postgresql":  # the seeds took ids 1 by hand
        op.execute("SELECT setval('workspaces_id_seq', 1)")
        op.execute("SELECT setval('projects_id_seq', 1)")
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("project_id", sa.Integer(), nullable=False, server_default="1"))
    op.create_index("ix_experiments_project_id", "experiments", ["project_id"])
    with op.batch_alter_table("agents") as batch:
        # slot id (as a string) -> true when draining (running work finishes), false when disabled outright
        batch.add_column(sa.Column("disabled_slots", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("disabled_slots")
    op.drop_index("ix_experiments_project_id", "experiments")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("project_id")
    op.drop_index("ix_projects_workspace_id", "projects")
    op.drop_table("projects")
    op.drop_table("workspaces")
