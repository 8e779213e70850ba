"""`det experiment` (alias `det e`): create, list, describe, pause/activate/kill, wait, logs, config
(continue, delete, archive, unarchive and list-trials: `experiment_lifecycle.py`).

Paths and shapes are Determined 0.38.1's (reference §2-3) plus two read endpoints the master
offers for describe: `GET /api/v1/trials/{id}/metrics?group=` and `/checkpoints`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from controlplane.cli import context as ctx
from controlplane.cli import experiment_lifecycle, render
from controlplane.cli.checkpoint import add_list_checkpoints
from controlplane.cli.common import (
    TERMINAL_EXPERIMENT_STATES,
    avg_metrics,
    format_number,
    metric_value,
    paged,
    parse_priority,
    parse_weight,
    positive_id,
    print_json,
    searcher_metric,
    session_for,
)
from controlplane.cli.errors import ApiError, CliError
from controlplane.cli.logs import add_log_flags, print_trial_logs
from controlplane.cli.pages import cursor_paged
from controlplane.cli.progress import ProgressBody
from controlplane.cli.session import UPLOAD_TIMEOUT, Session
from controlplane.config.stored import searcher_of

FOLLOW_POLL_S = 0.1


# ---- create ---------------------------------------------------------------------------------
def load_config(path: Path, overrides: list[str], *, partial: bool = False) -> str:
    """The YAML text to send (as written, or re-dumped after --config overrides), validated.

    ``partial``: a template fills the rest on the master, which validates the merged config."""
    try:
        text = path.read_text()
    except OSError as e:
        raise CliError(f"cannot read experiment config {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"experiment config {path} is not UTF-8 text") from None
    from controlplane.config.errors import ConfigError
    from controlplane.config.experiment import parse_experiment_config
    from controlplane.config.yaml_io import apply_overrides, load_yaml

    try:
        raw = load_yaml(text, str(path))
        if overrides:
            raw = apply_overrides(raw, list(overrides))
            text = yaml.safe_dump(raw, sort_keys=False)
        if not partial:
            parse_experiment_config(raw)
    except ConfigError as e:
        raise CliError(f"invalid experiment config: {e}") from None
    return text


def create_body(config_text: str, model_definition: list[dict[str, Any]], paused: bool,
                template: str | None = None) -> bytes:
    return json.dumps({
        "config": config_text,
        "modelDefinition": model_definition,
        "activate": not paused,
        "parentId": None,
        "projectId": None,
        "template": template,
        "validateOnly": False,
    }).encode()


def cmd_create(args: argparse.Namespace) -> int:
    if args.local or args.test_mode:
        return create_local(args)
    config_text = load_config(Path(args.config_file), args.config or [], partial=args.template is not None)
    files = ctx.collect(Path(args.context_dir)) if args.context_dir else []
    session = session_for(args)
    session.ensure_token()  # log in before the upload, not after a 401 on a big body
    body = ProgressBody(create_body(config_text, files, args.paused, args.template))
    resp = session.post("/api/v1/experiments", data=body, timeout=UPLOAD_TIMEOUT)
    exp = resp.get("experiment") or {}
    exp_id = exp.get("id")
    if not isinstance(exp_id, int):
        raise CliError("the master answered the create without an experiment id")
    for warning in resp.get("warnings") or []:
        if warning == "LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED":
            print("Warning: the experiment requests more slots than the cluster currently has.", file=sys.stderr)
    for message in resp.get("warningMessages") or []:  # this master's own, in words
        print(f"Warning: {message}", file=sys.stderr)
    if args.json:
        print_json(exp)
    else:
        print(f"Created experiment {exp_id}")
    if args.follow_first_trial and not args.paused:
        sys.stdout.flush()
        return follow_first_trial(session, exp_id)
    return 0


def create_local(args: argparse.Namespace) -> int:
    """``--local --test-mode``: a compressed run on this machine, no master (cli/local_test.py)."""
    if not args.local:
        raise CliError("--test-mode needs --local here: the test runs on this machine, without a master")
    if not args.test_mode:
        raise CliError("--local needs --test-mode: only a compressed test run is offered without a master; "
                       "to run the whole experiment, start a cluster (det deploy local up) and leave out --local")
    if args.paused or args.follow_first_trial or args.template:
        raise CliError("--paused, --follow-first-trial and --template do not apply to --local --test-mode")
    from controlplane.cli import local_test

    config_text = load_config(Path(args.config_file), args.config or [])
    return local_test.run_local_test(config_text, local_test.check_context(args.context_dir), as_json=args.json)


def _first_trial_id(session: Session, exp_id: int) -> int | None:
    trials = session.get(f"/api/v1/experiments/{exp_id}/trials").get("trials") or []
    ids = [t["id"] for t in trials if isinstance(t.get("id"), int)]
    return min(ids) if ids else None


def _state(session: Session, exp_id: int) -> str:
    return str((session.get(f"/api/v1/experiments/{exp_id}").get("experiment") or {}).get("state", ""))


def follow_first_trial(session: Session, exp_id: int) -> int:
    """Wait for the first trial, stream its logs, then wait for the experiment to end."""
    last_state_check = 0.0
    while True:
        trial_id = _first_trial_id(session, exp_id)
        if trial_id is not None:
            break
        if time.monotonic() - last_state_check > 1.0:
            last_state_check = time.monotonic()
            state = _state(session, exp_id)
            if state in TERMINAL_EXPERIMENT_STATES:
                print(f"Experiment {exp_id} ended ({render.format_state(state)}) without any trial.",
                      file=sys.stderr)
                return 0 if state == "STATE_COMPLETED" else 1
        time.sleep(FOLLOW_POLL_S)
    print_trial_logs(session, trial_id, follow=True)
    state = wait_for_end(session, exp_id, interval=1.0, announce=False)
    print(f"Experiment {exp_id} ended: {render.format_state(state)}", file=sys.stderr)
    return 0 if state == "STATE_COMPLETED" else 1


# ---- list / describe ------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    session = session_for(args)
    params: dict[str, Any] = {}
    if not args.all:
        params = {"users": session.current_username(), "archived": "false"}
    experiments = list(paged(session, "/api/v1/experiments", "experiments", params))
    if args.json:
        print_json(experiments)
        return 0
    rows = [[e.get("id"), e.get("username"), e.get("name"), render.format_state(e.get("state")),
             render.format_progress(e.get("progress")), render.format_time(e.get("startTime")),
             render.format_time(e.get("endTime")), e.get("resourcePool") or ""] for e in experiments]
    print(render.table(["ID", "Owner", "Name", "State", "Progress", "Start Time", "End Time", "Resource Pool"],
                       rows))
    return 0


def get_experiment(session: Session, exp_id: int) -> dict[str, Any]:
    body = session.get(f"/api/v1/experiments/{exp_id}")
    exp = body.get("experiment")
    if not isinstance(exp, dict):
        raise CliError(f"the master sent no experiment {exp_id}")
    if not isinstance(exp.get("config"), dict) and isinstance(body.get("config"), dict):
        exp["config"] = body["config"]
    return exp


def get_trials(session: Session, exp_id: int) -> list[dict[str, Any]]:
    return list(paged(session, f"/api/v1/experiments/{exp_id}/trials", "trials"))


def trial_metrics(session: Session, trial_id: int, group: str) -> list[dict[str, Any]]:
    rows = cursor_paged(session, f"/api/v1/trials/{trial_id}/metrics", "metrics", {"group": group})
    return sorted(rows, key=lambda r: r.get("stepsCompleted") or 0)


def trial_checkpoints(session: Session, trial_id: int) -> list[dict[str, Any]]:
    return list(session.get(f"/api/v1/trials/{trial_id}/checkpoints").get("checkpoints") or [])


def best_validation(trial: dict[str, Any]) -> Any:
    best = trial.get("bestValidation")
    if isinstance(best, dict) and best.get("searcherMetric") is not None:
        return metric_value(best["searcherMetric"])
    return metric_value(trial.get("searcherMetricValue"))


def cmd_describe(args: argparse.Namespace) -> int:
    session = session_for(args)
    exp = get_experiment(session, args.experiment_id)
    trials = get_trials(session, args.experiment_id)
    metric, smaller = searcher_metric(exp.get("config"))
    if args.json:
        out = []
        for t in trials:
            out.append({**t,
                        "metrics": {"training": trial_metrics(session, t["id"], "training"),
                                    "validation": trial_metrics(session, t["id"], "validation")},
                        "checkpoints": trial_checkpoints(session, t["id"])})
        print_json({"experiment": exp, "trials": out})
        return 0
    searcher_name = searcher_of(exp.get("config")).name
    summary = [
        ("State", render.format_state(exp.get("state"))),
        ("Progress", render.format_progress(exp.get("progress"))),
        ("Owner", exp.get("username") or ""),
        ("Searcher", f"{searcher_name or exp.get('searcherType', '')} "
                     f"(metric: {metric or '-'}, {'smaller' if smaller else 'larger'} is better)"),
        ("Start Time", render.format_time(exp.get("startTime"))),
        ("End Time", render.format_time(exp.get("endTime"))),
        ("Resource Pool", exp.get("resourcePool") or ""),
    ]
    if exp.get("description"):
        summary.append(("Description", exp["description"]))
    if exp.get("labels"):
        summary.append(("Labels", ", ".join(map(str, exp["labels"]))))
    print(f"Experiment {exp.get('id')}: {exp.get('name', '')}")
    for key, value in summary:
        print(f"  {key + ':':<15} {value}".rstrip())
    print()
    print("Trials:")
    rows = [[t.get("id"), render.format_state(t.get("state")),
             json.dumps(t.get("hparams") or {}, sort_keys=True), t.get("restarts", 0),
             t.get("totalBatchesProcessed", 0), render.format_metric(best_validation(t)),
             t.get("latestCheckpointUuid") or ""] for t in trials]
    print(render.table(["Trial ID", "State", "H-Params", "Restarts", "Batches",
                        f"Best validation ({metric})" if metric else "Best validation", "Checkpoint"], rows))
    scored = [(v, t) for t in trials if isinstance(v := best_validation(t), (int, float)) and math.isfinite(v)]
    if scored:
        value, best = (min if smaller else max)(scored, key=lambda vt: vt[0])
        print(f"\nBest trial: {best.get('id')} ({metric} {render.format_metric(value)}), hyperparameters "
              f"{json.dumps(best.get('hparams') or {}, sort_keys=True)}, checkpoint {best.get('latestCheckpointUuid')}")
    if args.metrics:
        print()
        print(f"Validation {metric or 'metric'} per trial (by batches):")
        mrows = []
        for t in trials:
            reports = trial_metrics(session, t["id"], "validation")
            values = [metric_value(avg_metrics(r).get(metric)) for r in reports]
            finite = [float(v) for v in values
                      if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            mrows.append([t.get("id"), len(reports), render.sparkline(values),
                          render.format_metric(min(finite)) if finite else "",
                          render.format_metric(values[-1]) if values else ""])
        print(render.table(["Trial ID", "Validations", "Trend", "Min", "Last"], mrows))
    return 0


# ---- state changes --------------------------------------------------------------------------
def _action(verb: str, past: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        session_for(args).post(f"/api/v1/experiments/{args.experiment_id}/{verb}")
        print(f"{past} experiment {args.experiment_id}")
        return 0

    run.__doc__ = f"POST /api/v1/experiments/{{id}}/{verb} (no body)."
    return run


cmd_pause = _action("pause", "Paused")
cmd_activate = _action("activate", "Activated")
cmd_kill = _action("kill", "Killed")


def wait_for_end(session: Session, exp_id: int, *, interval: float, announce: bool = True,
                 unreachable_grace_s: float = 120.0) -> str:
    """Poll until a terminal state; a briefly unreachable master (restart) is waited out."""
    last = None
    down_since: float | None = None
    while True:
        try:
            state = _state(session, exp_id)
            down_since = None
        except ApiError:
            raise
        except CliError:
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > unreachable_grace_s:
                raise
            time.sleep(interval)
            continue
        if state != last:
            if announce:
                print(f"Experiment {exp_id}: {render.format_state(state)}", flush=True)
            last = state
        if state in TERMINAL_EXPERIMENT_STATES:
            return state
        time.sleep(interval)


def cmd_wait(args: argparse.Namespace) -> int:
    state = wait_for_end(session_for(args), args.experiment_id, interval=args.interval)
    return 0 if state == "STATE_COMPLETED" else 1


def cmd_logs(args: argparse.Namespace) -> int:
    session = session_for(args)
    trial_id = _first_trial_id(session, args.experiment_id)
    if trial_id is None:
        get_experiment(session, args.experiment_id)  # a missing experiment says so
        raise CliError(f"experiment {args.experiment_id} has no trials yet")
    print_trial_logs(session, trial_id, follow=args.follow, head=args.head, tail=args.tail)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    exp = get_experiment(session_for(args), args.experiment_id)
    sys.stdout.write(yaml.safe_dump(exp.get("config") or {}, sort_keys=False, default_flow_style=False))
    return 0


# ---- set priority / weight / max-slots ------------------------------------------------------
def parse_max_slots(text: str) -> int | None:
    """A positive slot cap, or `none` to remove the cap."""
    if text.strip().lower() in ("none", "null", "unlimited"):
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < 1:
        raise CliError(f"max-slots must be a positive integer or 'none', got {text!r}")
    return value


# command -> (v1PatchExperiment resources key, value parser)
SETTABLE: dict[str, tuple[str, Callable[[str], object]]] = {
    "priority": ("priority", parse_priority),
    "weight": ("weight", parse_weight),
    "max-slots": ("maxSlots", parse_max_slots),
}


def cmd_set(args: argparse.Namespace) -> int:
    """PATCH /api/v1/experiments/{id} with {"id", "resources": {<key>: value}} (v1PatchExperiment)."""
    key, parse = SETTABLE[args.setting]
    value = parse(args.value)
    body = session_for(args).patch(f"/api/v1/experiments/{args.experiment_id}",
                                   {"id": args.experiment_id, "resources": {key: value}})
    exp = body.get("experiment") if isinstance(body, dict) else None
    if args.json:
        print_json(exp if isinstance(exp, dict) else body)
        return 0
    shown = "none" if value is None else format_number(value)
    print(f"Set {args.setting} of experiment {args.experiment_id} to {shown}")
    return 0


# ---- parser ---------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("experiment", aliases=["e", "exp"], help="manage experiments")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create an experiment from a config file and a context directory")
    p.add_argument("config_file", metavar="CONFIG", help="experiment config (YAML)")
    p.add_argument("context_dir", metavar="CONTEXT", nargs="?", help="model definition directory to upload")
    p.add_argument("-f", "--follow-first-trial", action="store_true", help="print the first trial's logs")
    p.add_argument("--paused", action="store_true", help="create the experiment without starting it")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="override a config field (repeatable)")
    p.add_argument("--template", metavar="NAME",
                   help="merge this config template under the config on the master (det template list)")
    p.add_argument("--json", action="store_true", help="print the created experiment as JSON")
    p.add_argument("--local", action="store_true", help="run on this machine without a master (with --test-mode)")
    p.add_argument("--test-mode", "--test", dest="test_mode", action="store_true",
                   help="with --local: a few batches, one validation, one checkpoint and a restore from it; "
                        "says which step passed (--json: as JSON); exit 1 if any failed")
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("list", aliases=["ls"], help="list experiments")
    p.add_argument("--all", "-a", action="store_true", help="include other users' and archived experiments")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="an experiment, its trials and (with --metrics) their progress")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--metrics", action="store_true", help="show each trial's validation metric trend")
    p.add_argument("--json", action="store_true", help="experiment, trials, metrics and checkpoints as JSON")
    p.set_defaults(func=cmd_describe)

    for name, func, help_text in (("pause", cmd_pause, "pause an experiment"),
                                  ("activate", cmd_activate, "activate (resume) an experiment"),
                                  ("kill", cmd_kill, "kill an experiment")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("experiment_id", metavar="ID", type=positive_id)
        p.set_defaults(func=func)

    p = sub.add_parser("wait", help="wait for an experiment to end; exit 0 only if it COMPLETED")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between polls")
    p.set_defaults(func=cmd_wait)

    p = sub.add_parser("logs", help="logs of the experiment's first trial")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    add_log_flags(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("set", help="change an experiment's priority, weight or max-slots")
    settings = p.add_subparsers(dest="setting", metavar="SETTING", required=True)
    for name, help_text, value_help in (
            ("priority", "scheduling priority, 1 (highest) to 99 (priority scheduler)", "1..99"),
            ("weight", "fair-share weight, > 0 (fair_share scheduler)", "WEIGHT"),
            ("max-slots", "most slots the experiment may use at once ('none' removes the cap)", "N|none")):
        sp = settings.add_parser(name, help=help_text)
        sp.add_argument("experiment_id", metavar="ID", type=positive_id)
        sp.add_argument("value", metavar=value_help)
        sp.add_argument("--json", action="store_true", help="print the updated experiment as JSON")
        sp.set_defaults(func=cmd_set)

    add_list_checkpoints(sub, positive_id)
    experiment_lifecycle.add_commands(sub)  # continue, delete, archive, unarchive, list-trials

    p = sub.add_parser("config", help="print the experiment's config as YAML")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.set_defaults(func=cmd_config)
