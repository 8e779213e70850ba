#!/usr/bin/env bash
# The whole test suite: unit tests, then cluster scenarios, each against SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
