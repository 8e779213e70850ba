#!/usr/bin/env bash
# The whole test suite: the house style (ruff, mypy; configured in pyproject.toml), then unit tests,
# then cluster scenarios, each against SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
