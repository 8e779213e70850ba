"""`det trial` (alias `det t`): describe a trial and print its logs.

`describe --json` gives the same per-trial object as `det e describe --json`:
the trial plus `metrics: {training, validation}` and `checkpoints`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from controlplane.cli import render
from controlplane.cli.common import avg_metrics, metric_value, positive_id, print_json, searcher_metric, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.experiment import best_validation, trial_checkpoints, trial_metrics
from controlplane.cli.logs import add_log_flags, print_trial_logs, rank_id

MAX_METRIC_COLUMNS = 8


def cmd_describe(args: argparse.Namespace) -> int:
    session = session_for(args)
    trial = session.get(f"/api/v1/trials/{args.trial_id}").get("trial")
    if not isinstance(trial, dict):
        raise CliError(f"the master sent no trial {args.trial_id}")
    training = trial_metrics(session, args.trial_id, "training")
    validation = trial_metrics(session, args.trial_id, "validation")
    checkpoints = trial_checkpoints(session, args.trial_id)
    if args.json:
        print_json({**trial, "metrics": {"training": training, "validation": validation},
                    "checkpoints": checkpoints})
        return 0
    metric = ""
    if trial.get("experimentId"):
        exp = session.get(f"/api/v1/experiments/{trial['experimentId']}")
        metric, _ = searcher_metric((exp.get("experiment") or {}).get("config") or exp.get("config"))
    print(f"Trial {trial.get('id')} of experiment {trial.get('experimentId')}")
    for key, value in (("State", render.format_state(trial.get("state"))),
                       ("H-Params", json.dumps(trial.get("hparams") or {}, sort_keys=True)),
                       ("Restarts", trial.get("restarts", 0)),
                       ("Batches", trial.get("totalBatchesProcessed", 0)),
                       ("Best validation", render.format_metric(best_validation(trial))),
                       ("Start Time", render.format_time(trial.get("startTime"))),
                       ("End Time", render.format_time(trial.get("endTime"))),
                       ("Checkpoint", trial.get("latestCheckpointUuid") or "")):
        print(f"  {key + ':':<17} {value}".rstrip())
    if validation:
        keys = sorted({k for r in validation for k in avg_metrics(r)})
        if metric in keys:
            keys.remove(metric)
            keys.insert(0, metric)
        keys = keys[:MAX_METRIC_COLUMNS]
        print()
        print("Validation metrics:")
        rows = [[r.get("stepsCompleted"), render.format_time(r.get("reportTime")),
                 *[render.format_metric(metric_value(avg_metrics(r).get(k))) for k in keys]] for r in validation]
        print(render.table(["Batches", "Report Time", *keys], rows))
    if checkpoints:
        print()
        print("Checkpoints:")
        rows = []
        for c in checkpoints:
            size = sum(int(v) for v in (c.get("resources") or {}).values() if str(v).isdigit())
            rows.append([c.get("uuid"), render.format_state(c.get("state")),
                         (c.get("metadata") or {}).get("steps_completed", ""),
                         render.format_time(c.get("reportTime")), render.format_size(size)])
        print(render.table(["UUID", "State", "Batches", "Report Time", "Size"], rows))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    print_trial_logs(session_for(args), args.trial_id, follow=args.follow, head=args.head, tail=args.tail,
                     ranks=args.ranks)
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("trial", aliases=["t"], help="inspect trials")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("describe", help="a trial, its validation metrics and checkpoints")
    p.add_argument("trial_id", metavar="ID", type=positive_id)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("logs", help="print a trial's logs")
    p.add_argument("trial_id", metavar="ID", type=positive_id)
    add_log_flags(p)
    p.add_argument("--rank", "--rank-ids", dest="ranks", metavar="N", type=rank_id, nargs="+", action="extend",
                   help="only the lines of worker rank N (several ranks, or the flag again, for more)")
    p.set_defaults(func=cmd_logs)
