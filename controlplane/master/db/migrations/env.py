"""Alembic environment: run by controlplane.master.db.migrate with a live connection."""

from alembic import context

from controlplane.master.db.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
