"""`det checkpoint describe|download|rm` and `det experiment list-checkpoints`.

Downloads go straight to the checkpoint's storage when this machine can reach it (its
`checkpoint_storage` from the experiment config, credentials from the usual chain) and otherwise
through the master as a tar.gz (`GET /checkpoints/{uuid}`), as Determined's `--mode auto` does.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from controlplane.cli.common import print_json, searcher_metric, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.progress import bar_line
from controlplane.cli.render import format_metric, format_size, format_state, format_time, table
from controlplane.cli.session import Session

DOWNLOADABLE = ("STATE_COMPLETED", "STATE_PARTIALLY_DELETED")


def _checkpoint(session: Session, uuid: str) -> dict[str, Any]:
    return session.get(f"/api/v1/checkpoints/{uuid}")["checkpoint"]


def _size(c: dict[str, Any]) -> int:
    return sum(int(v) for v in (c.get("resources") or {}).values())


def _metric(c: dict[str, Any]) -> Any:
    training = c.get("training") or {}
    name, _ = searcher_metric(training.get("experimentConfig") or {})
    return ((training.get("validationMetrics") or {}).get("avgMetrics") or {}).get(name)


def _storage_words(storage: dict[str, Any]) -> str:
    kind = storage.get("type", "?")
    if kind in ("s3", "gcs"):
        prefix = f"/{storage['prefix'].strip('/')}" if storage.get("prefix") else ""
        return f"{'s3' if kind == 's3' else 'gs'}://{storage.get('bucket')}{prefix}"
    return f"{kind} {storage.get('host_path') or storage.get('container_path') or ''}".strip()


# ---- describe ---------------------------------------------------------------------------------
def cmd_describe(args: argparse.Namespace) -> int:
    c = _checkpoint(session_for(args), args.uuid)
    if args.json:
        print_json(c)
        return 0
    training = c.get("training") or {}
    storage = (training.get("experimentConfig") or {}).get("checkpoint_storage") or {}
    rows = [("UUID", c["uuid"]), ("State", format_state(c.get("state"))),
            ("Experiment", training.get("experimentId", "")), ("Trial", training.get("trialId", "")),
            ("Steps", (c.get("metadata") or {}).get("steps_completed", "")),
            ("Reported", format_time(c.get("reportTime"))), ("Size", format_size(_size(c))),
            ("Storage", _storage_words(storage)), ("Searcher metric", format_metric(_metric(c)))]
    deletion = c.get("deletion")
    if deletion:
        rows.append(("Deletion", deletion.get("reason", "")))
        if deletion.get("error"):
            rows.append(("Last deletion error", f"{deletion['error']} (after {deletion.get('attempts')} attempts)"))
    print(table(["Field", "Value"], rows))
    files = sorted((c.get("resources") or {}).items())
    if files:
        print()
        print(table(["File", "Size"], [(p, format_size(int(s))) for p, s in files]))
    return 0


# ---- download ---------------------------------------------------------------------------------
REDACTED = "********"  # what the master shows in place of a secret (controlplane/master/redaction.py)


def client_storage_config(storage: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The storage config without the secrets the master withheld, and their names: a direct
    download then uses the SDK's own credential chain (environment, ~/.aws, gcloud) instead of
    authenticating with the mask itself."""
    withheld = sorted(k for k, v in storage.items() if v == REDACTED)
    return {k: v for k, v in storage.items() if k not in withheld}, withheld


def _direct(c: dict[str, Any], dst: Path) -> None:
    from controlplane.storage import from_config
    from controlplane.storage.digests import verify

    storage = ((c.get("training") or {}).get("experimentConfig") or {}).get("checkpoint_storage")
    if not storage:
        raise FileNotFoundError("the checkpoint's experiment config names no checkpoint_storage")
    if storage.get("type") == "shared_fs" and not Path(storage.get("host_path", "")).is_dir():
        raise FileNotFoundError(f"{storage.get('host_path')} is not mounted here")
    storage, withheld = client_storage_config(storage)
    if withheld:
        print(f"(the master does not hand out {', '.join(withheld)}; using this machine's own credentials)",
              file=sys.stderr)
    store = from_config(storage, dst)
    print(f"Downloading checkpoint {c['uuid']} from {_storage_words(storage)} ...", file=sys.stderr)
    had_files = dst.is_dir() and any(dst.iterdir())
    store.download(c["uuid"], dst)
    # refused, naming the file, if one is not what was reported (changed in storage since)
    verify(dst, c.get("digests"), c["uuid"], others_ok=had_files)


def _through_master(session: Session, c: dict[str, Any], dst: Path) -> None:
    print(f"Downloading checkpoint {c['uuid']} through the master ...", file=sys.stderr)
    resp = session.request("GET", f"/checkpoints/{c['uuid']}", stream=True, timeout=(10, 600))
    total = int(resp.headers.get("Content-Length") or 0)
    show = sys.stderr.isatty() and total > 0
    with tempfile.TemporaryFile() as buf:  # on disk, not in memory: checkpoints are large
        done = 0
        for chunk in resp.iter_content(1 << 20):
            buf.write(chunk)
            done += len(chunk)
            if show:
                print("\r" + bar_line("downloading", done, total), end="", file=sys.stderr)
        if show:
            print(file=sys.stderr)
        buf.seek(0)
        dst.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=buf, mode="r:gz") as tar:
            tar.extractall(dst, filter="data")  # refuses absolute paths and ".." entries


def cmd_download(args: argparse.Namespace) -> int:
    from controlplane.storage import CheckpointChanged, StorageError

    session = session_for(args)
    c = _checkpoint(session, args.uuid)
    if c.get("state") not in DOWNLOADABLE:
        reason = (c.get("deletion") or {}).get("reason")
        raise CliError(f"checkpoint {args.uuid} is {format_state(c.get('state')).lower()}"
                       + (f": {reason}" if reason else "") + "; nothing to download")
    dst = Path(args.output_dir or Path("checkpoints") / args.uuid)
    if args.mode in ("auto", "direct"):
        try:
            _direct(c, dst)
        except CheckpointChanged as e:
            raise CliError(f"downloading checkpoint {args.uuid}: {e}") from None
        except (FileNotFoundError, StorageError) as e:
            if args.mode == "direct":
                raise CliError(f"downloading checkpoint {args.uuid} from its storage failed: {e}") from None
            print(f"(its storage is not reachable from here: {e}; asking the master)", file=sys.stderr)
            _through_master(session, c, dst)
    else:
        _through_master(session, c, dst)
    files = [p for p in dst.rglob("*") if p.is_file()]
    print(f"Downloaded checkpoint {args.uuid}: {len(files)} files, "
          f"{format_size(sum(p.stat().st_size for p in files))}, to {dst}")
    return 0


# ---- rm -----------------------------------------------------------------------------------------
def cmd_rm(args: argparse.Namespace) -> int:
    resp = session_for(args).request("DELETE", "/api/v1/checkpoints", body={"checkpointUuids": args.uuids})
    body = resp.json() if resp.content else {}
    if args.json:
        print_json(body)
    for uuid in body.get("deleted") or []:
        if not args.json:
            print(f"Deleted checkpoint {uuid}")
    failed = body.get("failed") or {}
    for uuid, error in failed.items():
        print(f"Deleting checkpoint {uuid} failed: {error}; the master keeps retrying", file=sys.stderr)
    return 1 if failed else 0


# ---- det experiment list-checkpoints ------------------------------------------------------------
def cmd_list_checkpoints(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"sortByAttr": "SORT_BY_END_TIME"}
    if args.best is not None:
        params = {"sortByAttr": "SORT_BY_SEARCHER_METRIC", "limit": args.best}
    body = session_for(args).get(f"/api/v1/experiments/{args.experiment_id}/checkpoints", params)
    ckpts = body.get("checkpoints") or []
    if args.json:
        print_json(ckpts)
        return 0
    if not ckpts:
        print(f"Experiment {args.experiment_id} has no checkpoints")
        return 0
    name, _ = searcher_metric(((ckpts[0].get("training") or {}).get("experimentConfig")) or {})
    rows = [((c.get("training") or {}).get("trialId", ""), (c.get("metadata") or {}).get("steps_completed", ""),
             format_state(c.get("state")), format_metric(_metric(c)), c["uuid"], format_size(_size(c)),
             format_time(c.get("reportTime"))) for c in ckpts]
    print(table(["Trial", "Steps", "State", name or "Metric", "UUID", "Size", "Reported"], rows))
    return 0


def add_list_checkpoints(sub: argparse._SubParsersAction[Any], positive_id: Any) -> None:
    p = sub.add_parser("list-checkpoints", aliases=["lc"], help="an experiment's checkpoints")
    p.add_argument("experiment_id", metavar="ID", type=positive_id)
    p.add_argument("--best", type=int, metavar="N", help="only the N best by the searcher metric")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list_checkpoints)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("checkpoint", aliases=["c"], help="inspect, download and delete checkpoints")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("describe", help="a checkpoint: state, trial, steps, size, storage, files")
    p.add_argument("uuid", metavar="UUID")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_describe)
    p = sub.add_parser("download", help="download a checkpoint's files")
    p.add_argument("uuid", metavar="UUID")
    p.add_argument("-o", "--output-dir", metavar="DIR", help="where to put the files (default checkpoints/UUID)")
    p.add_argument("--mode", choices=("auto", "direct", "master"), default="auto",
                   help="auto: straight from storage when reachable, else through the master")
    p.set_defaults(func=cmd_download)
    p = sub.add_parser("rm", help="delete checkpoints: their files, then their records")
    p.add_argument("uuids", metavar="UUID", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_rm)
