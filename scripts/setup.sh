#!/usr/bin/env bash
# Creates .venv/ with the project (editable), its test tools and a CPU build of torch, and
# installs bubblewrap, slirp4netns and iproute2 (as root, through apt-get) for det-agent's task
# sandbox and task networks.
# Safe to run again: pip skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# det-agent runs tasks under bubblewrap and refuses to start without it.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }) ||
      echo "warning: could not install bubblewrap; det-agent needs it (or --task-runtime process)" >&2
  else
    echo "warning: bubblewrap (bwrap) is missing; install it (e.g. sudo apt-get install bubblewrap):" \
         "det-agent refuses to start without it unless given --task-runtime process" >&2
  fi
fi
# det-agent puts each job's tasks in a network namespace of its own (iproute2) with a route out
# through slirp4netns; without them it runs tasks on the host's network and says so.
if ! command -v slirp4netns >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq slirp4netns iproute2 >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq slirp4netns iproute2 >/dev/null 2>&1; }) ||
      echo "warning: could not install slirp4netns/iproute2; det-agent's tasks would share the host's network" >&2
  else
    echo "warning: slirp4netns or iproute2 is missing: det-agent's tasks share the host's network" >&2
  fi
fi
# The web UI's browser tests drive Debian's chromium (Playwright's own browser download cannot work here).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq chromium >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }) ||
      echo "warning: could not install chromium; the web UI's browser tests need it" >&2
  else
    echo "warning: chromium is missing (e.g. sudo apt-get install chromium): the web UI's browser tests need it" >&2
  fi
fi
# The web UI's htmx and uPlot, from npm (webui/package-lock.json), copied into the package.
bash scripts/webui_assets.sh
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0" numpy
# DeepSpeed (a dev extra) ships only an sdist whose build imports torch: built here against the
# torch above, without build isolation (which would download a CUDA torch) and without its
# requirements (the next line brings them, torch already satisfied). Ops are compiled at run time.
if ! .venv/bin/python -m pip show -q deepspeed >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q setuptools wheel
  DS_BUILD_OPS=0 .venv/bin/python -m pip install -q --no-build-isolation --no-deps "deepspeed==0.19.8"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
echo "set-up done: .venv/bin/{det,det-master,det-agent}"
