"""A database error never puts the values bound to its statement (what a user sent) in its text or the log."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from controlplane.master import app as master_app
from controlplane.master.db.engine import describe_error, make_engine

pytestmark = pytest.mark.both_databases  # each driver words its errors (and quotes values) its own way

SECRET = "hunter2-b1946ac92492d2347c6235b4d2611184"


async def test_a_failed_statement_logs_where_it_failed_but_not_its_parameters(db_url, caplog):
    engine = make_engine(db_url)
    try:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError) as failed:
                await conn.execute(text("SELECT * FROM no_such_table WHERE name = :name"), {"name": SECRET})
    finally:
        await engine.dispose()
    exc = failed.value
    assert SECRET not in str(exc), str(exc)
    assert "no_such_table" in describe_error(exc) and "test_database_errors.py" in describe_error(exc)
    request = SimpleNamespace(method="POST", url=SimpleNamespace(path="/api/v1/workspaces"))
    with caplog.at_level(logging.DEBUG):
        response = master_app._internal_error(request, exc)  # type: ignore[arg-type]
    assert response.status_code == 500
    assert "internal error on POST /api/v1/workspaces: database error" in caplog.text
    assert SECRET not in caplog.text and not any(r.exc_info for r in caplog.records), caplog.text
