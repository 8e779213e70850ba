#!/usr/bin/env bash
# The whole test suite: the house style (ruff, mypy; configured in pyproject.toml), then every test
# (unit, API, cluster scenarios marked e2e), in DET_TEST_WORKERS worker processes (default: one per
# core), SQL that can differ on SQLite and PostgreSQL (tests/README.md). It prints the 25 slowest
# steps; scripts/test_times.sh sums a run's durations by directory. Arguments go to pytest
# (e.g. -m "not e2e" for the fast inner loop).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The suite starts hundreds of Python processes (det, det-master, agents, launchers, workers): with
# byte-code caches written, each no longer compiles the project's modules again.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -n "${DET_TEST_WORKERS:-auto}" --dist loadgroup --durations=25 "$@"
