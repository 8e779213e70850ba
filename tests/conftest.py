"""Fixtures shared by the whole suite: the databases a test runs on.

Which databases a test runs on
------------------------------
A test that asks for ``db_url`` (or for a fixture built on it, such as ``api``) runs on **SQLite
only** unless its module (or the test) says ``pytestmark = pytest.mark.both_databases``. Mark it
so when what it checks goes through SQL whose behaviour can differ between the two: column types
and their limits, NUL bytes and text encoding, locking and concurrent writers, migrations, ordering
and pagination, JSON columns read in SQL, aggregates, the metric/log ingest path. Input validation
refused before anything is stored, authorization, HTTP shapes, pages and pure logic run once.

``pytest.mark.one_database("postgres")`` runs a test on PostgreSQL alone (where PostgreSQL is what a
user of that scenario runs, e.g. a production cluster). DET_TEST_DATABASES=sqlite (or postgres)
narrows every test to that backend.

Each test gets its own database
-------------------------------
``db_url``: an empty database (a fresh SQLite file under ``tmp_path``, or a new PostgreSQL
database dropped afterwards), for tests of migrations and of start-up itself.

``master_db_url``: a copy of a database migrated to head with the default users already in it,
made once per test process (an SQLite file copied with the backup API, or ``CREATE DATABASE ...
TEMPLATE`` on PostgreSQL). The master's start-up finds everything it would create and goes on.
"""

from __future__ import annotations

import os

import pytest

from tests.support import deadline
from tests.support.databases import TemplateDatabases, empty_database

BACKENDS = [b.strip() for b in os.environ.get("DET_TEST_DATABASES", "sqlite,postgres").split(",") if b.strip()]


def backends_for(node) -> list[str]:
    """The backends a test runs on, from its markers (see the module docstring)."""
    if node.get_closest_marker("both_databases") is not None:
        return list(BACKENDS)
    one = node.get_closest_marker("one_database")
    preferred = one.args[0] if one is not None and one.args else "sqlite"
    return [preferred] if preferred in BACKENDS else BACKENDS[:1]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_backend" in metafunc.fixturenames:
        metafunc.parametrize("db_backend", backends_for(metafunc.definition), indirect=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    deadline.start(item)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Cluster scenarios first (stable within each kind): they take minutes each, and the workers
    then finish together on the short tests instead of one waiting out a long scenario at the end."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


@pytest.fixture
def db_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def db_url(db_backend, tmp_path):
    """An empty database on the test's backend."""
    with empty_database(db_backend, tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def _migrated_templates(tmp_path_factory):
    """Per test process: the migrated, seeded template database of each backend, made on first use."""
    templates = TemplateDatabases(tmp_path_factory.mktemp("db-templates"))
    yield templates
    templates.drop()


@pytest.fixture
def master_db_url(db_backend, tmp_path, _migrated_templates):
    """A copy of the migrated database with the default users, on the test's backend."""
    with _migrated_templates.copy(db_backend, tmp_path) as url:
        yield url
