#!/usr/bin/env bash
# Where the suite's time goes: sums a pytest run's durations (set-up + call + teardown) by directory.
#
#   .venv/bin/python -m pytest -q -n 2 --durations=0 --durations-min=0 -p no:cacheprovider > run.txt
#   bash scripts/test_times.sh run.txt            # or: ... | bash scripts/test_times.sh -
#
# Reads the "slowest durations" lines pytest prints with --durations=0 (`1.23s call  tests/a/b.py::t`)
# and prints two tables sorted by total: per top-level directory (tests/e2e) and per directory two
# levels down (tests/controlplane/master), each with its items, seconds and share of the whole.
# Durations are per worker: with -n 2 they add up to about twice the wall time. Without
# --durations-min=0 pytest leaves out steps under 5 ms, and the items they belong to go uncounted.
set -euo pipefail
if [ $# -ne 1 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
# The program goes in -c, so that standard input stays free for "-".
prog=$(cat <<'EOF'
import collections
import re
import sys

LINE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")
HIDDEN = re.compile(r"^\((\d+) durations < ([0-9.]+s) hidden")
src = sys.stdin if sys.argv[1] == "-" else open(sys.argv[1], encoding="utf-8", errors="replace")
seconds = {1: collections.Counter(), 2: collections.Counter()}
items = {1: collections.defaultdict(set), 2: collections.defaultdict(set)}
total, hidden = 0.0, None
for line in src:
    if m := HIDDEN.match(line):
        hidden = m.groups()
    m = LINE.match(line)
    if not m:
        continue
    secs, nodeid = float(m.group(1)), m.group(3)
    total += secs
    parts = nodeid.split("::", 1)[0].split("/")[:-1] or ["."]  # the test file's directories
    for depth in (1, 2):
        key = "/".join(parts[: depth + 1]) if parts[0] == "tests" else "/".join(parts[:depth])
        seconds[depth][key] += secs
        items[depth][key].add(nodeid)
if not total:
    sys.exit("no duration lines found: run pytest with --durations=0")
for depth, title in ((1, "by top-level directory"), (2, "by directory")):
    print(f"{title}:")
    print(f"  {'seconds':>9}  {'share':>6}  {'items':>6}  directory")
    for key, secs in seconds[depth].most_common():
        print(f"  {secs:9.1f}  {secs / total:6.1%}  {len(items[depth][key]):6d}  {key}")
    print()
print(f"total: {total:.1f} s of test time")
if hidden:
    print(f"({hidden[0]} steps under {hidden[1]} were not printed, so items of only such steps are not "
          "counted: run pytest with --durations-min=0)")
EOF
)
exec python3 -c "$prog" "$1"
