"""`det template` (alias `det tpl`): config templates (Determined 0.38.1's commands and paths).

A template holds settings many experiments share; `det experiment create --template NAME` has the
master merge it under the experiment's config (the config wins, maps merge, lists are replaced).
`set` creates the template or replaces its config in one request; `create` refuses a name in use.
`list` and `describe` show configs as the master answers them: secrets masked. A masked value
`set` sends back keeps the stored secret, so describe, edit, set is safe.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from controlplane.cli import render
from controlplane.cli.common import paged, print_json, session_for
from controlplane.cli.errors import CliError


def template_path(name: str) -> str:
    return f"/api/v1/templates/{quote(name, safe='')}"


def read_template_file(path: str) -> dict[str, Any]:
    """The YAML file as a mapping (an empty file is an empty template), bounded like a config."""
    from controlplane.config.errors import ConfigError
    from controlplane.config.yaml_io import load_yaml

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise CliError(f"cannot read template file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"template file {path} is not UTF-8 text") from None
    try:
        return load_yaml(text, path)
    except ConfigError as e:
        raise CliError(f"invalid template file: {e}") from None


def config_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config or {}, sort_keys=False, default_flow_style=False)


# ---- commands -------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    templates = list(paged(session_for(args), "/api/v1/templates", "templates", {"sortBy": "SORT_BY_NAME"}))
    if args.json:
        print_json(templates)
        return 0
    if args.details:
        rows = [[t.get("name"), t.get("username"), config_yaml(t.get("config") or {}).rstrip()] for t in templates]
        print(render.table(["Name", "Owner", "Config"], rows))
    else:
        print(render.table(["Name", "Owner"], [[t.get("name"), t.get("username")] for t in templates]))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    template = session_for(args).get(template_path(args.name)).get("template") or {}
    if args.json:
        print_json(template)
    else:
        sys.stdout.write(config_yaml(template.get("config") or {}))
    return 0


def _send(args: argparse.Namespace, method: str, done: str) -> int:
    config = read_template_file(args.file)
    body = {"name": args.name, "config": config, "workspaceId": 0}
    session = session_for(args)
    send = session.put if method == "PUT" else session.post
    template = send(template_path(args.name), body).get("template") or {}
    if args.json:
        print_json(template)
    else:
        print(f"{done} template {args.name}")
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    return _send(args, "PUT", "Set")


def cmd_create(args: argparse.Namespace) -> int:
    return _send(args, "POST", "Created")


def cmd_remove(args: argparse.Namespace) -> int:
    session_for(args).delete(template_path(args.name))
    print(f"Removed template {args.name}")
    return 0


# ---- parser ---------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("template", aliases=["tpl"], help="config templates for experiments")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", aliases=["ls"], help="list the templates")
    p.add_argument("-d", "--details", action="store_true", help="show each template's config")
    p.add_argument("--json", action="store_true", help="print the templates as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="print a template's config as YAML (secrets masked)")
    p.add_argument("name", metavar="NAME", help="the template's name")
    p.add_argument("--json", action="store_true", help="print the template as JSON")
    p.set_defaults(func=cmd_describe)

    for name, func, help_text in (("set", cmd_set, "create a template, or replace its config"),
                                  ("create", cmd_create, "create a template (refused if the name is in use)")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("name", metavar="NAME", help="the template's name")
        p.add_argument("file", metavar="FILE", help="the template's config (YAML, part of an experiment config)")
        p.add_argument("--json", action="store_true", help="print the stored template as JSON")
        p.set_defaults(func=func)

    p = sub.add_parser("rm", aliases=["remove"], help="delete a template (experiments made with it stay)")
    p.add_argument("name", metavar="NAME", help="the template's name")
    p.set_defaults(func=cmd_remove)
