"""`det experiment continue|delete|archive|unarchive|list-trials`, as Determined 0.38.1's CLI names
and prints them (its `det e` commands over the same REST paths)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from controlplane.cli import render
from controlplane.cli.common import paged, positive_id, print_json, session_for
from controlplane.cli.errors import CliError


def _override_config(config_file: str | None, overrides: list[str]) -> str:
    """The YAML of ``--config-file`` with ``--config KEY=VALUE`` applied (Determined's
    ``overrideConfig``: merged over the experiment's config by the master, which validates it)."""
    from controlplane.config.errors import ConfigError
    from controlplane.config.yaml_io import apply_overrides, load_yaml

    cfg: dict[str, Any] = {}
    if config_file:
        try:
            loaded = load_yaml(Path(config_file).read_text(), source=config_file)
        except OSError as e:
            raise CliError(f"cannot read {config_file}: {e.strerror}") from None
        except ConfigError as e:
            raise CliError(str(e)) from None
        cfg = loaded if isinstance(loaded, dict) else {}
    try:
        cfg = apply_overrides(cfg, overrides)
    except ConfigError as e:
        raise CliError(str(e)) from None
    return yaml.safe_dump(cfg, sort_keys=False)


def cmd_continue(args: argparse.Namespace) -> int:
    session = session_for(args)
    body = {"id": args.experiment_id, "overrideConfig": _override_config(args.config_file, args.config or [])}
    session.post("/api/v1/experiments/continue", body)
    print(f"Continued experiment {args.experiment_id}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    if not args.yes:
        sys.stderr.write(f"Deleting experiment {args.experiment_id} removes its logs, metrics and checkpoints for "
                         "good ('det e archive' hides it instead). Proceed? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("Aborting experiment deletion.")
            return 1
    answer = session_for(args).delete(f"/api/v1/experiments/{args.experiment_id}")
    state = answer.get("state") if isinstance(answer, dict) else None
    if state == "STATE_DELETE_FAILED":
        raise CliError(f"experiment {args.experiment_id} was deleted but some checkpoint files could not be "
                       "removed; they are retried, and deleting it again finishes")
    print(f"Deleted experiment {args.experiment_id}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    session_for(args).post(f"/api/v1/experiments/{args.experiment_id}/{args.command}")
    print(f"{args.command.capitalize()}d experiment {args.experiment_id}")
    return 0


def cmd_list_trials(args: argparse.Namespace) -> int:
    trials = list(paged(session_for(args), f"/api/v1/experiments/{args.experiment_id}/trials", "trials"))
    if args.json:
        print_json(trials)
        return 0
    rows = [[t.get("id"), render.format_state(t.get("state")), json.dumps(t.get("hparams") or {}, indent=4),
             render.format_time(t.get("startTime")), render.format_time(t.get("endTime")),
             t.get("totalBatchesProcessed")] for t in trials]
    print(render.table(["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"], rows))
    return 0


def add_commands(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("continue", help="run an ended experiment's unfinished trials again from their checkpoints")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--config-file", default=None, help="config fields to change (YAML)")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a config field to change (repeatable)")
    p.set_defaults(func=cmd_continue)

    p = sub.add_parser("delete", help="delete an ended experiment with its logs, metrics and checkpoints")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_delete)

    for name, help_text in (("archive", "hide an ended experiment from 'det e list' (--all shows it)"),
                            ("unarchive", "list an archived experiment again")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("experiment_id", metavar="ID", type=positive_id)
        p.set_defaults(func=cmd_archive)

    p = sub.add_parser("list-trials", aliases=["lt"], help="an experiment's trials")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list_trials)
