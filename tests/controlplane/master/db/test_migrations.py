"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from controlplane.master.db.engine import make_engine
from controlplane.master.db.migrate import upgrade_to_head
from controlplane.master.db.models import Base


async def test_migrations_match_the_models(db_url):
    engine = make_engine(db_url)
    try:
        await upgrade_to_head(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(lambda c: compare_metadata(MigrationContext.configure(c), Base.metadata))
    finally:
        await engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"
