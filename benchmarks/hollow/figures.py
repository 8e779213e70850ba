"""Percentiles, a process's CPU and memory from /proc, and ``--compare`` (a growth per figure)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Recorder:
    """Latencies (seconds) per name, and counters, as the hollow side sees them."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.counts: dict[str, int] = defaultdict(int)

    def time(self, name: str, seconds: float) -> None:
        self.latencies[name].append(seconds)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


def _family(pid: int) -> list[int]:
    """``pid`` and its descendants (a master that runs helpers in child processes counts them)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its living descendants."""
    total = 0.0
    for p in _family(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set of ``pid`` alone, MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def last_figures(output: str) -> list[dict[str, float]]:
    """The closing ``agents=...`` line of each size in a run's output."""
    runs = []
    for line in output.splitlines():
        if line.startswith("agents="):
            runs.append({k: float(v) for k, v in (pair.split("=", 1) for pair in line.split())})
    if not runs:
        raise SystemExit("--compare: no 'agents=... ' line in that file")
    return runs


# Figures where a growth says nothing (sizes, counts that should stay 0, settings).
NOT_GROWTH = {"agents", "slots_per_agent", "slots", "trial_s", "churn_s"}


def print_growth(figures: dict[str, float], baseline: dict[str, float]) -> None:
    """Each figure's ratio over the baseline run's (the run of ``--compare``)."""
    scale = figures["slots"] / baseline["slots"]
    print(f"growth from {baseline['agents']:.0f} x {baseline['slots_per_agent']:.0f} to "
          f"{figures['agents']:.0f} x {figures['slots_per_agent']:.0f} (cluster x{scale:.1f}):")
    for key, value in figures.items():
        old = baseline.get(key)
        if key in NOT_GROWTH or old is None:
            continue
        ratio = f"{value / old:6.2f}x" if old else ("  same" if value == old else "   new")
        print(f"  {key:<28} {old:>10.3f} -> {value:>10.3f}  {ratio}")
