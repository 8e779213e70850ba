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
# The real determined==0.38.1 client's venv (tests/support/determined_venv.py; a minute or more to
# build on a clean checkout) builds beside the linters, not inside a test while the other workers
# wait on its lock. Nothing is lost if it fails here: the first test that needs it builds it again.
[ "${1:-}" = "-m" ] && [ "${2:-}" = "not e2e" ] || {
  .venv/bin/python -c "from tests.support.determined_venv import ensure_determined_venv as e; e()" \
    > /tmp/det-venv-build.$$.log 2>&1 & }
.venv/bin/ruff check .
.venv/bin/mypy
wait  # its exit status is not checked: see above
exec .venv/bin/python -m pytest -q -n "${DET_TEST_WORKERS:-auto}" --dist loadgroup --durations=25 "$@"
