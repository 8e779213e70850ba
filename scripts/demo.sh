#!/usr/bin/env bash
# One command for a new user: set up .venv, start a local cluster whose agents the master
# launches on demand (the `local` provider), run the example hyperparameter search, print its
# trials and the best one, and show the instances coming and going.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
DATA_DIR=${DATA_DIR:-$PWD/.det-local}
PORT=${PORT:-8080}
det deploy local up --autoscale --port "$PORT" --agents 2 --slots-per-agent 2 --idle-period 10s --data-dir "$DATA_DIR"
export DET_MASTER="http://127.0.0.1:$PORT"
exp_id=$(det experiment create examples/spirals/random.yaml examples/spirals --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
sleep 3
echo "== the autoscaler launched agents for the search:"
det resource-pool describe default
det experiment wait "$exp_id"
det experiment describe "$exp_id" --metrics
echo
echo "== after ${IDLE_WAIT:-15}s idle the agents are gone again:"
sleep "${IDLE_WAIT:-15}"
det resource-pool describe default
echo
echo "The master is still up at $DET_MASTER; stop it with: .venv/bin/det deploy local down --data-dir $DATA_DIR"
