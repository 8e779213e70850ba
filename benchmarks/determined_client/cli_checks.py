"""The ``cli`` group: ``det`` over every command group a Determined user uses on a cluster, in three
parts that share what earlier checks found (S: experiment, trial and checkpoint ids); and the
unscored ``--extra`` probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.determined_client.cli_admin_checks import run_admin_checks
from benchmarks.determined_client.cli_experiment_checks import run_experiment_checks
from benchmarks.determined_client.cli_live_work_checks import run_live_work_checks
from benchmarks.determined_client.cluster import Master, RealDet
from benchmarks.determined_client.scoreboard import Scoreboard, expect, one_line


def run_cli(board: Scoreboard, det: RealDet, master: Master, work: Path) -> dict[str, Any]:
    S: dict[str, Any] = {}
    run_admin_checks(board, det, master, work, S)
    run_experiment_checks(board, det, master, work, S)
    run_live_work_checks(board, det, master, work, S)
    return S


def run_cli_extra(board: Scoreboard, det: RealDet, S: dict[str, Any], work: Path) -> None:
    """``--extra``: 0.38.1 commands left out of the 94 (less used, deprecated, or another spelling of
    a path the 94 cover), each run once; a pass is an exit 0 without 'Failed'. Printed, not scored."""
    a, ta = S.get("A"), S.get("TA")
    probes: list[tuple[str, list[str], str | None]] = [
        ("master cluster-message set", ["master", "cluster-message", "set", "-m", "score", "--duration", "1h"], None),
        ("master cluster-message get", ["master", "cluster-message", "get"], "score"),
        ("master cluster-message clear", ["master", "cluster-message", "clear"], None),
        ("experiment set log-retention", ["experiment", "set", "log-retention", str(a), "--days", "30"], None),
        ("trial set log-retention", ["trial", "set", "log-retention", str(ta), "--forever"], None),
        ("experiment delete-tb-files", ["experiment", "delete-tb-files", str(a)], None),
        ("experiment logs --tail", ["experiment", "logs", str(a), "--tail", "3"], "report_validation_metrics"),
        ("experiment list-checkpoints --best 1", ["experiment", "list-checkpoints", str(a), "--best", "1"], None),
        ("trial logs --json", ["trial", "logs", str(ta), "--head", "2", "--json"], '"message"'),
        ("trial download --best", ["trial", "download", str(ta), "--best", "-o", str(work / "extra-best")], None),
        ("token create", ["token", "create", "admin", "--description", "score"], None),
        ("token describe", ["token", "describe", "1"], None),
        ("workspace create", ["workspace", "create", "score-extra"], None),
        ("workspace archive", ["workspace", "archive", "score-extra"], None),
        ("workspace unarchive", ["workspace", "unarchive", "score-extra"], None),
        ("project create", ["project", "create", "score-extra", "p-extra"], None),
        ("project archive", ["project", "archive", "score-extra", "p-extra"], None),
        ("project unarchive", ["project", "unarchive", "score-extra", "p-extra"], None),
        ("project edit --description", ["project", "edit", "score-extra", "p-extra", "--description", "d"], None),
        ("workspace edit --name", ["workspace", "edit", "score-extra", "--name", "score-extra2"], None),
        ("user rename", ["user", "rename", "scorer", "scorer2"], None),
    ]
    for name, args, wanted in probes:
        def probe(args: list[str] = args, wanted: str | None = wanted) -> None:
            out = det(*args, timeout=120)
            said = out.stdout + out.stderr
            expect("Failed" not in said, one_line(said[-200:]))
            if wanted:
                expect(wanted in said, f"no {wanted!r} in: {one_line(said[-200:])}")
        board.check("cli-extra", name, probe)
