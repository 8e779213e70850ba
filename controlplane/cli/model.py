"""`det model` (alias `det m`): the model registry (Determined 0.38.1, reference §3).

A model groups checkpoints of any experiments under a name, as versions 1, 2, 3, ... NAME may
also be the model's numeric id. `--json` prints what Determined's CLI prints: the model
(`create`, `describe`, `update`), the list of models (`list`), and the master's whole answer
for `register-version` and `list-versions`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from controlplane.cli import render
from controlplane.cli.common import paged, print_json, session_for
from controlplane.cli.errors import CliError

SORTS = {"name": "SORT_BY_NAME", "description": "SORT_BY_DESCRIPTION", "creation_time": "SORT_BY_CREATION_TIME",
         "last_updated_time": "SORT_BY_LAST_UPDATED_TIME", "num_versions": "SORT_BY_NUM_VERSIONS"}
ORDERS = {"asc": "ORDER_BY_ASC", "desc": "ORDER_BY_DESC"}


def model_path(name: str) -> str:
    return f"/api/v1/models/{quote(name, safe='')}"


# ---- arguments ------------------------------------------------------------------------------
def json_object(text: str) -> dict[str, Any]:
    """argparse type for --metadata: a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def label_list(text: str) -> list[str]:
    """argparse type for --labels: comma-separated; an empty string clears the labels."""
    return [label.strip() for label in text.split(",") if label.strip()]


def optional_fields(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The camelCase body entries for the flags that were given."""
    out = {}
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


# ---- rendering ------------------------------------------------------------------------------
MODEL_HEADERS = ["ID", "Name", "Description", "Versions", "Labels", "Owner", "Creation Time", "Last Updated Time",
                 "Metadata"]
VERSION_HEADERS = ["Version #", "Name", "Experiment ID", "Trial ID", "Batch #", "Checkpoint UUID",
                   "Validation Metrics", "Registered"]


def model_row(m: dict[str, Any]) -> list[Any]:
    return [m.get("id"), m.get("name"), m.get("description") or "", m.get("numVersions"),
            ", ".join(m.get("labels") or []), m.get("username"), render.format_time(m.get("creationTime")),
            render.format_time(m.get("lastUpdatedTime")), m.get("metadata") or {}]


def _metrics(checkpoint: dict[str, Any]) -> str:
    avg = (((checkpoint.get("training") or {}).get("validationMetrics") or {}).get("avgMetrics")) or {}
    return ", ".join(f"{k}={render.format_metric(v)}" for k, v in sorted(avg.items()))


def version_row(v: dict[str, Any]) -> list[Any]:
    ckpt = v.get("checkpoint") or {}
    training = ckpt.get("training") or {}
    return [v.get("version"), v.get("name") or "", training.get("experimentId"), training.get("trialId"),
            (ckpt.get("metadata") or {}).get("steps_completed"), ckpt.get("uuid"), _metrics(ckpt),
            render.format_time(v.get("creationTime"))]


def print_model(model: dict[str, Any]) -> None:
    print(render.table(MODEL_HEADERS, [model_row(model)]))
    if model.get("notes"):
        print(f"\nNotes:\n{model['notes']}")


def print_versions(versions: list[dict[str, Any]]) -> None:
    print(render.table(VERSION_HEADERS, [version_row(v) for v in versions]))


# ---- commands -------------------------------------------------------------------------------
def cmd_create(args: argparse.Namespace) -> int:
    if args.description_arg is not None and args.description is not None:
        raise CliError("give the description once: as DESCRIPTION or with --description")
    body = {"name": args.name, "description": args.description_arg if args.description is None else args.description,
            "labels": args.labels, "metadata": args.metadata, "notes": args.notes, "workspaceName": None}
    model = session_for(args).post("/api/v1/models", body).get("model") or {}
    if args.json:
        print_json(model)
    else:
        print_model(model)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    params = {"sortBy": SORTS[args.sort_by], "orderBy": ORDERS[args.order_by]}
    models = list(paged(session_for(args), "/api/v1/models", "models", params))
    if args.json:
        print_json(models)
        return 0
    print(render.table(MODEL_HEADERS, [model_row(m) for m in models]))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    session = session_for(args)
    model = session.get(model_path(args.name)).get("model") or {}
    path = model_path(str(model.get("id", args.name)))
    if args.version_number is not None:
        versions = [session.get(f"{path}/versions/{args.version_number}").get("modelVersion") or {}]
    else:  # the latest version, as Determined asks for it
        versions = session.get(f"{path}/versions", {"limit": 1, "sortBy": "SORT_BY_VERSION",
                                                    "orderBy": "ORDER_BY_DESC"}).get("modelVersions") or []
    if args.json:
        print_json(model)
        return 0
    print_model(model)
    if versions:
        print()
        print_versions(versions)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    body = optional_fields(args, "description", "notes", "metadata", "labels")
    if args.new_name is not None:
        body["name"] = args.new_name
    if not body:
        raise CliError("nothing to update: give --name, --description, --notes, --metadata or --labels")
    model = session_for(args).patch(model_path(args.name), body).get("model") or {}
    if args.json:
        print_json(model)
    else:
        print_model(model)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    session_for(args).delete(model_path(args.name))
    print(f"Deleted model {args.name}")
    return 0


def cmd_register_version(args: argparse.Namespace) -> int:
    body = {"checkpointUuid": args.uuid, **optional_fields(args, "comment", "notes", "metadata", "labels")}
    if args.version_name is not None:
        body["name"] = args.version_name
    resp = session_for(args).post(f"{model_path(args.name)}/versions", body)
    if args.json:
        print_json(resp)
        return 0
    version = resp.get("modelVersion") or {}
    model_name = (version.get("model") or {}).get("name", args.name)
    print(f"Registered checkpoint {args.uuid} as version {version.get('version')} of model {model_name}")
    print_versions([version])
    return 0


def cmd_list_versions(args: argparse.Namespace) -> int:
    resp = session_for(args).get(f"{model_path(args.name)}/versions",
                                 {"sortBy": "SORT_BY_VERSION", "orderBy": ORDERS[args.order_by]})
    if args.json:
        print_json(resp)
        return 0
    print_model(resp.get("model") or {})
    print()
    print_versions(resp.get("modelVersions") or [])
    return 0


def cmd_delete_version(args: argparse.Namespace) -> int:
    session_for(args).delete(f"{model_path(args.name)}/versions/{args.version_number}")
    print(f"Deleted version {args.version_number} of model {args.name}")
    return 0


# ---- parser ---------------------------------------------------------------------------------
def _version_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a version number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"versions are numbered from 1, got {text!r}")
    return value


def _details(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--notes", help=f"notes on the {what} (free text)")
    p.add_argument("--metadata", type=json_object, metavar="JSON", help=f"the {what}'s metadata, a JSON object")
    p.add_argument("--labels", type=label_list, metavar="A,B", help=f"the {what}'s labels, comma-separated")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("model", aliases=["m"], help="the model registry")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a model in the registry")
    p.add_argument("name", metavar="NAME", help="a unique name (not only digits)")
    p.add_argument("description_arg", metavar="DESCRIPTION", nargs="?", help="what the model is")
    p.add_argument("--description", help="what the model is (same as DESCRIPTION)")
    _details(p, "model")
    p.add_argument("--json", action="store_true", help="print the model as JSON")
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("list", aliases=["ls"], help="list the models of the registry")
    p.add_argument("--sort-by", choices=sorted(SORTS), default="last_updated_time", help="sort by this field")
    p.add_argument("--order-by", choices=sorted(ORDERS), default="asc", help="ascending or descending")
    p.add_argument("--json", action="store_true", help="print the models as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="a model and its latest version (or --version N)")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    # dest is not "version": that is the global `det --version` flag's.
    p.add_argument("--version", dest="version_number", type=_version_number, metavar="N",
                   help="show this version instead of the latest")
    p.add_argument("--json", action="store_true", help="print the model as JSON")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("update", help="change a model's name, description, notes, metadata or labels")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    p.add_argument("--name", dest="new_name", metavar="NEW_NAME", help="rename the model")
    p.add_argument("--description", help="the new description")
    _details(p, "model")
    p.add_argument("--json", action="store_true", help="print the updated model as JSON")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("delete", help="delete a model and its versions (the checkpoints stay)")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("register-version", help="register a completed checkpoint as the model's next version")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    p.add_argument("uuid", metavar="UUID", help="the checkpoint's uuid")
    p.add_argument("--name", dest="version_name", metavar="VERSION_NAME", help="a name for this version")
    p.add_argument("--comment", help="a comment on this version")
    _details(p, "version")
    p.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    p.set_defaults(func=cmd_register_version)

    p = sub.add_parser("list-versions", help="a model and all its versions")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    p.add_argument("--order-by", choices=sorted(ORDERS), default="asc", help="by version number")
    p.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    p.set_defaults(func=cmd_list_versions)

    p = sub.add_parser("delete-version", help="delete one version of a model (the checkpoint stays)")
    p.add_argument("name", metavar="NAME", help="the model's name or id")
    p.add_argument("version_number", metavar="N", type=_version_number, help="the version number")
    p.set_defaults(func=cmd_delete_version)
