#!/usr/bin/env bash
# Creates .venv/ with the project (editable), its test tools and a CPU build of torch.
# Safe to run again: pip skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0" numpy
.venv/bin/python -m pip install -q -e ".[dev]"
echo "set-up done: .venv/bin/{det,det-master,det-agent}"
