"""How fast is a config over the limits refused, and does refusing it slow anyone else?

Starts a real det-master (SQLite in a temp dir) with --experiments small experiments to list, then:

- POSTs a --hyperparameters (60,000) hyperparameter config (about 1 MB of YAML, what the issue's
  audit sent) to `/api/v1/experiments` --runs times alone, as `det experiment create` sends it (the
  YAML text in `config`) and as a JSON object, and times each 400;
- POSTs it from --concurrent (3) clients at once, --rounds times, while a probe lists experiments
  (`GET /api/v1/experiments?limit=10`) every 50 ms and times each answer;
- times configs that stay under the limits but are large (999 hyperparameters; nesting at the depth
  limit; a searcher with every field; `validateOnly`, so nothing is stored).

Prints the figures and ends with one key=value line. To compare with another checkout, run its copy
with PYTHONPATH set to it (the master is the venv's det-master, which imports what PYTHONPATH puts first):

    .venv/bin/python benchmarks/config_limits.py                     # ~10 s after the change
    git worktree add /tmp/before <commit> && cp benchmarks/config_limits.py /tmp/before/benchmarks/ && \\
        PYTHONPATH=/tmp/before .venv/bin/python /tmp/before/benchmarks/config_limits.py --runs 1 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.cluster import MasterProcess, login

BASE = {"name": "bench", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}


def huge_config(n: int) -> dict[str, Any]:
    """``n`` hyperparameters, mostly constants, every 20th an int range: ~1 MB of YAML at 60,000."""
    hps = {f"h{i}": ({"type": "int", "minval": 1, "maxval": 10} if i % 20 == 0 else i) for i in range(n)}
    return {**BASE, "hyperparameters": hps}


def large_valid_configs() -> dict[str, dict[str, Any]]:
    deep: Any = 1
    for _ in range(60):  # with `data` and the top level: 62 of the 64 levels allowed
        deep = {"d": deep}
    searcher = {"name": "adaptive_asha", "metric": "loss", "smaller_is_better": True, "max_trials": 16,
                "max_length": {"batches": 1000}, "mode": "standard", "divisor": 4, "max_rungs": 5,
                "max_concurrent_trials": 4, "bracket_rungs": [], "stop_once": False}
    return {
        "999_hyperparameters": {**BASE, "hyperparameters": {
            f"h{i}": {"type": "int", "minval": 1, "maxval": 10} for i in range(999)}},
        "depth_at_limit": {**BASE, "data": deep},
        "searcher_fields": {**BASE, "searcher": searcher, "hyperparameters": {
            "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
            "layers": {"type": "categorical", "vals": list(range(500))}}},
    }


def body(config: dict[str, Any], as_json: bool, validate_only: bool = False) -> dict[str, Any]:
    return {"config": config if as_json else yaml.safe_dump(config, sort_keys=False, default_flow_style=None),
            "modelDefinition": [], "validateOnly": validate_only}


def post(url: str, token: str, payload: dict[str, Any]) -> tuple[float, int, str]:
    start = time.perf_counter()
    r = requests.post(f"{url}/api/v1/experiments", json=payload, timeout=600,
                      headers={"Authorization": f"Bearer {token}"})
    return (time.perf_counter() - start) * 1000, r.status_code, r.text


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def probe(url: str, token: str, stop: threading.Event, out: list[float]) -> None:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token}"
    while not stop.is_set():
        start = time.perf_counter()
        r = s.get(f"{url}/api/v1/experiments", params={"limit": 10}, timeout=600)
        r.raise_for_status()
        out.append((time.perf_counter() - start) * 1000)
        stop.wait(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hyperparameters", type=int, default=60_000)
    ap.add_argument("--runs", type=int, default=5, help="refusals timed alone, per body format")
    ap.add_argument("--concurrent", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --concurrent refusals at once")
    ap.add_argument("--experiments", type=int, default=20, help="experiments the probe lists")
    args = ap.parse_args()

    huge = huge_config(args.hyperparameters)
    print(f"config: {args.hyperparameters} hyperparameters, "
          f"{len(body(huge, False)['config']) / 1024:.0f} KiB of YAML")
    with tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp) / "master", f"sqlite:///{tmp}/master.db").start()
        try:
            token = login(master.url)
            for i in range(args.experiments):
                _, status, text = post(master.url, token, body({**BASE, "name": f"e{i}"}, False))
                assert status == 200, text
            refusals: list[float] = []
            for fmt, as_json in (("yaml", False), ("json", True)):
                times = []
                for _ in range(args.runs):
                    ms, status, text = post(master.url, token, body(huge, as_json))
                    assert status == 400 and "hyperparameters" in text, (status, text[:300])
                    times.append(ms)
                refusals += times
                print(f"alone, {fmt} body: p50 {statistics.median(times):.0f} ms, max {max(times):.0f} ms "
                      f"({text[:160]})")

            listed: list[float] = []
            stop = threading.Event()
            prober = threading.Thread(target=probe, args=(master.url, token, stop, listed))
            prober.start()
            time.sleep(0.5)
            quiet = len(listed)
            together: list[float] = []
            with ThreadPoolExecutor(args.concurrent) as pool:
                for r in range(args.rounds):
                    payload = body(huge, as_json=r % 2 == 1)
                    results = list(pool.map(lambda p: post(master.url, token, p), [payload] * args.concurrent))
                    assert all(status == 400 for _, status, _ in results), results[0][2][:300]
                    together += [ms for ms, _, _ in results]
            stop.set()
            prober.join()
            during = listed[quiet:]
            print(f"{args.concurrent} at once x {args.rounds}: p50 {statistics.median(together):.0f} ms, "
                  f"max {max(together):.0f} ms")
            print(f"experiment list meanwhile: {len(during)} calls, p50 {pct(during, 50):.0f} ms, "
                  f"p99 {pct(during, 99):.0f} ms, max {max(during, default=float('nan')):.0f} ms "
                  f"(quiet: p50 {pct(listed[:quiet], 50):.0f} ms)")

            valid: dict[str, float] = {}
            for name, config in large_valid_configs().items():
                for fmt, as_json in (("yaml", False), ("json", True)):
                    ms, status, text = post(master.url, token, body(config, as_json, validate_only=True))
                    assert status == 200, (name, text[:300])
                    valid[f"{name}/{fmt}"] = ms
            for name, ms in valid.items():
                print(f"under the limits, {name}: {ms:.0f} ms (validateOnly)")
        finally:
            master.stop()
    all_refusals = refusals + together
    print(f"refuse_p50_ms={statistics.median(refusals):.0f} refuse_max_ms={max(all_refusals):.0f} "
          f"list_p99_ms_during={pct(during, 99):.0f} valid_max_ms={max(valid.values()):.0f}")


if __name__ == "__main__":
    main()
