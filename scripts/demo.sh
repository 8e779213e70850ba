#!/usr/bin/env bash
# One command for a new user: set up .venv, start a local cluster, run the example
# hyperparameter search, print its trials and the best one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
DATA_DIR=${DATA_DIR:-$PWD/.det-local}
PORT=${PORT:-8080}
det deploy local up --port "$PORT" --agents 2 --slots-per-agent 2 --data-dir "$DATA_DIR"
export DET_MASTER="http://127.0.0.1:$PORT"
exp_id=$(det experiment create examples/spirals/random.yaml examples/spirals --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
det experiment wait "$exp_id"
det experiment describe "$exp_id" --metrics
echo
echo "The cluster is still up at $DET_MASTER; stop it with: .venv/bin/det deploy local down --data-dir $DATA_DIR"
