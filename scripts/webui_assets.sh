#!/usr/bin/env bash
# The web UI's browser libraries (htmx, uPlot), installed from npm with webui/package-lock.json and
# copied into the package's static files, so the master serves every asset itself (no CDN).
# Safe to run again: it copies only when the lock file or a copied file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENDOR=controlplane/master/webui/static/vendor
STAMP=$VENDOR/.lock-sha256
want=$(sha256sum webui/package-lock.json | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$VENDOR/htmx.min.js" ] && [ -f "$VENDOR/uPlot.iife.min.js" ]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "error: npm is needed for the web UI's assets (node 20)" >&2; exit 1; }
(cd webui && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
mkdir -p "$VENDOR"
cp webui/node_modules/htmx.org/dist/htmx.min.js "$VENDOR/"
cp webui/node_modules/uplot/dist/uPlot.iife.min.js webui/node_modules/uplot/dist/uPlot.min.css "$VENDOR/"
cp webui/node_modules/uplot/LICENSE "$VENDOR/uPlot.LICENSE"
cp webui/node_modules/htmx.org/LICENSE "$VENDOR/htmx.LICENSE"
echo "$want" > "$STAMP"
