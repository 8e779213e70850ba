"""`det deploy aws|gcp up|down|list`: a whole cluster in a cloud account, with Pulumi.

`up` validates the flags (`infra.options`; a bad value is exit 2 naming the flag), runs the
preflight checks (all failures at once), then brings the Pulumi stack named after the cluster
id up, streaming Pulumi's progress; at the end it prints the master URL and how to log in.
`--dry-run` needs neither credentials nor the Pulumi CLI: it runs the program under Pulumi's
mocks and prints what it would create. Re-running `up` on an existing stack shows what would be
replaced; replacing the database needs `--allow-db-replace` or the cluster id typed back, never
just `--yes` (`infra/engine/guard.py`). `down` asks first (unless `--yes`), stops the master,
removes every agent by tag/label (`infra/teardown/`), then destroys the stack. `list` shows the
stacks of the backend with their outputs. State: `infra/engine/backend.py`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controlplane.cli import render
from controlplane.cli.errors import CliError


@dataclass(frozen=True)
class Cloud:
    """What `det deploy <cloud>` needs of one cloud; each loads its SDK and infra modules lazily."""

    build_options: Callable[[argparse.Namespace], Any]
    settings: Callable[[Any], dict[str, str]]  # plain stack config: what `down` needs later
    preflight: Callable[[Any], Any]  # options -> a report of warnings and failures
    build: Callable[[Any], None]  # the Pulumi program's body
    teardown: Callable[[str, dict[str, str]], Any]  # (cluster id, settings) -> a teardown report


def _aws_options(args: argparse.Namespace) -> Any:
    from infra.options import AwsOptions, parse_tags

    kw: dict[str, Any] = {"cluster_id": args.cluster_id, "region": args.region,
                          "inbound_cidr": _inbound_cidr(args), "keypair": args.keypair,
                          "spot": args.spot, "agent_image_id": args.agent_image_id, "tags": parse_tags(args.add_tag)}
    _given(kw, master_instance_type=args.master_instance_type, max_dynamic_agents=args.max_dynamic_agents,
           db=args.db, gpu_agent_instance_types=tuple(args.gpu_agent_instance_type or ()) or None)
    return AwsOptions(**kw)


def _gcp_options(args: argparse.Namespace) -> Any:
    from infra.options import GcpOptions, OptionError, parse_tags

    try:
        labels = parse_tags(args.add_label)
    except OptionError as e:
        raise OptionError("--add-label", str(e).split(": ", 1)[1]) from e
    kw: dict[str, Any] = {"cluster_id": args.cluster_id, "project_id": args.project_id, "region": args.region,
                          "zone": args.zone, "inbound_cidr": _inbound_cidr(args), "spot": args.spot,
                          "agent_image": args.agent_image, "labels": labels}
    _given(kw, master_machine_type=args.master_machine_type, max_dynamic_agents=args.max_dynamic_agents,
           db=args.db, gpu_type=args.gpu_type, gpus_per_agent=args.gpus_per_agent,
           gpu_agent_machine_types=tuple(args.gpu_agent_machine_type or ()) or None)
    return GcpOptions(**kw)


def _given(kw: dict[str, Any], **values: Any) -> None:
    """Flags left out keep the options' defaults (one place says what they are)."""
    kw.update({k: v for k, v in values.items() if v is not None})


def _inbound_cidr(args: argparse.Namespace) -> str:
    if not args.inbound_cidr:
        from infra.options import OptionError

        raise OptionError("--inbound-cidr", "required: the network allowed to reach the master, e.g. your "
                                            "address as A.B.C.D/32 (nothing is opened to 0.0.0.0/0 by default)")
    return str(args.inbound_cidr)


def _aws_preflight(opts: Any) -> Any:
    from infra.preflight.aws import check

    return check(opts)


def _gcp_preflight(opts: Any) -> Any:
    from infra.preflight.gcp import check

    return check(opts)


def _aws_build(opts: Any) -> None:
    from infra.aws.program import build

    build(opts)


def _gcp_build(opts: Any) -> None:
    from infra.gcp.program import build

    build(opts)


def _aws_teardown(cluster_id: str, settings: dict[str, str]) -> Any:
    import boto3

    from infra.teardown.aws import teardown

    ec2 = boto3.session.Session().client("ec2", region_name=settings.get("aws:region"))
    return teardown(ec2, cluster_id, say=_say)


def _gcp_teardown(cluster_id: str, settings: dict[str, str]) -> Any:
    from infra.gcp_clients import GcpClients
    from infra.teardown.gcp import teardown

    return teardown(GcpClients(), settings["gcp:project"], settings["gcp:region"], cluster_id, say=_say)


CLOUDS = {
    "aws": Cloud(_aws_options, lambda o: {"aws:region": o.region}, _aws_preflight, _aws_build, _aws_teardown),
    "gcp": Cloud(_gcp_options, lambda o: {"gcp:project": o.project_id, "gcp:region": o.region, "gcp:zone": o.zone},
                 _gcp_preflight, _gcp_build, _gcp_teardown),
}


def _options(args: argparse.Namespace) -> Any:
    from infra.options import OptionError

    try:
        return CLOUDS[args.target].build_options(args)
    except OptionError as e:
        raise CliError(str(e), exit_code=2) from e


def _engine(args: argparse.Namespace) -> Any:
    from infra.engine.backend import backend_for
    from infra.engine.errors import require_pulumi_cli
    from infra.engine.pulumi_engine import PulumiEngine
    from infra.options import OptionError

    with _engine_errors():
        require_pulumi_cli()
        try:
            backend = backend_for(args.state_bucket)
        except OptionError as e:
            raise CliError(str(e), exit_code=2) from e
        return PulumiEngine(args.target, backend)


@contextmanager
def _engine_errors() -> Iterator[None]:
    """EngineError / TeardownError -> `Error: <their sentence>`."""
    from infra.engine.errors import EngineError
    from infra.teardown import TeardownError

    try:
        yield
    except (EngineError, TeardownError) as e:
        raise CliError(str(e)) from e


def _confirm(question: str, expected: str | None) -> bool:
    """Ask at the terminal; without one nobody can confirm, so the answer is no."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [{'type it' if expected else 'y/N'}]: ").strip()
    except EOFError:
        return False
    return answer == expected if expected else answer.lower() in ("y", "yes")


def _say(text: str) -> None:
    print(text.rstrip("\n"), flush=True)


# ---- up -------------------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    opts = _options(args)
    if args.dry_run:
        from infra.dry_run import format_preview, preview

        print(format_preview(preview(args.target, opts)))
        return 0
    engine = _engine(args)
    _preflight(args.target, opts)
    from infra.engine.update import UpPolicy, bring_up

    program = _program(args.target, opts)
    with _engine_errors():
        stack = engine.open(opts.cluster_id, program, create=True)
        outputs = bring_up(stack, db_mode=opts.db, settings=CLOUDS[args.target].settings(opts),
                           policy=UpPolicy(assume_yes=args.yes, allow_db_replace=args.allow_db_replace),
                           confirm=_confirm, say=_say)
    _print_result(opts.cluster_id, outputs, args.json)
    return 0


def _preflight(cloud: str, opts: Any) -> None:
    report = CLOUDS[cloud].preflight(opts)
    for warning in report.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    if report.failures:
        raise CliError("preflight found what would stop the deployment; nothing was created:\n"
                       + "\n".join(f"  - {f}" for f in report.failures))


def _program(cloud: str, opts: Any) -> Callable[[], None]:
    build = CLOUDS[cloud].build

    def program() -> None:
        build(opts)

    return program


def _print_result(cluster_id: str, outputs: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(render.dump_json({"clusterId": cluster_id, "outputs": outputs}))
        return
    url = outputs.get("master_url", "")
    print(f"\nCluster {cluster_id} is up.")
    print(render.table(["output", "value"], sorted(outputs.items())))
    if url:
        print(f"\nLog in as admin (its password starts empty; set one at once):\n"
              f"  det -m {url} user login admin\n  det -m {url} user change-password admin")


# ---- down -----------------------------------------------------------------------------------
def cmd_down(args: argparse.Namespace) -> int:
    from infra.engine import down
    from infra.options import OptionError, check_cluster_id

    try:
        check_cluster_id(args.cluster_id)
    except OptionError as e:
        raise CliError(str(e), exit_code=2) from e
    engine = _engine(args)
    with _engine_errors():
        stack = engine.open(args.cluster_id, None, create=False)
        if stack is None:
            raise CliError(f"no deployment {args.cluster_id!r} in {engine.backend.url} "
                           f"(`det deploy {args.target} list` shows them)")
        down.check_database(stack, delete_database=args.delete_database)  # before any instance is touched
        if not args.yes and not _confirm(f"Destroy cluster {args.cluster_id}, its agents, database and "
                                         f"checkpoint bucket?", None):
            raise CliError("not confirmed: nothing was changed (pass --yes to skip the question)")
        report = _teardown(args.target, args.cluster_id, stack.settings())
        for line in report.lines():
            _say(line)
        down.destroy(stack, delete_database=args.delete_database, say=_say)
    _say(f"Cluster {args.cluster_id} is gone.")
    return 0


def _teardown(cloud: str, cluster_id: str, settings: dict[str, str]) -> Any:
    return CLOUDS[cloud].teardown(cluster_id, settings)


# ---- list -----------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    engine = _engine(args)
    with _engine_errors():
        infos = engine.list()
    if args.json:
        print(render.dump_json([{"clusterId": i.name, "lastUpdate": i.last_update, "resources": i.resource_count,
                                 "updating": i.update_in_progress, "outputs": i.outputs} for i in infos]))
        return 0
    rows = [(i.name, i.outputs.get("master_url", ""), i.outputs.get("bucket", ""), i.resource_count or 0,
             i.last_update or "", "yes" if i.update_in_progress else "") for i in infos]
    print(render.table(["cluster", "master url", "bucket", "resources", "last update", "updating"], rows))
    return 0


# ---- the parsers ----------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-bucket", metavar="URL",
                   help="keep Pulumi's state in s3://BUCKET or gs://BUCKET (default: a local backend "
                        "under ~/.config/controlplane/pulumi)")


def _up_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster-id", required=True, help="names the stack and tags every resource")
    p.add_argument("--region", required=True)
    p.add_argument("--inbound-cidr", metavar="CIDR", help="the only network that may reach the master (required)")
    p.add_argument("--max-dynamic-agents", type=int, metavar="N", help="most agents the master launches")
    p.add_argument("--spot", action="store_true", help="agents on spot capacity")
    p.add_argument("--yes", action="store_true", help="no questions (except replacing the database)")
    p.add_argument("--allow-db-replace", action="store_true",
                   help="let an update replace the database (its data is lost); --yes does not")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be created (Pulumi's mocks: no credentials, no Pulumi CLI)")
    p.add_argument("--json", action="store_true", help="print the outputs as JSON")
    _common(p)
    p.set_defaults(func=cmd_up)


def _down_and_list(sub: argparse._SubParsersAction[Any], target: str) -> None:
    p = sub.add_parser("down", help=f"stop the master, terminate every agent, destroy the {target} stack")
    p.add_argument("--cluster-id", required=True)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--delete-database", action="store_true",
                   help="also delete a managed database (RDS, Cloud SQL), which is deletion-protected; without "
                        "it, down refuses to touch a cluster that has one")
    _common(p)
    p.set_defaults(func=cmd_down)
    p = sub.add_parser("list", help="the deployments in the state backend and their outputs")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    _common(p)
    p.set_defaults(func=cmd_list)


def register_targets(targets: argparse._SubParsersAction[Any]) -> None:
    aws = targets.add_parser("aws", help="a cluster in an AWS account (Pulumi)")
    sub = aws.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("up", help="create or update the cluster")
    _up_common(p)
    p.add_argument("--keypair", help="EC2 key pair for SSH to the master (SSH only from --inbound-cidr)")
    p.add_argument("--master-instance-type", metavar="TYPE")
    p.add_argument("--gpu-agent-instance-type", action="append", metavar="TYPE",
                   help="an instance type agents may use (repeatable)")
    p.add_argument("--db", choices=("rds", "local"), help="PostgreSQL on RDS or on the master (default local)")
    p.add_argument("--add-tag", action="append", default=[], metavar="KEY=VALUE", help="a tag on every resource")
    p.add_argument("--agent-image-id", metavar="AMI", help="the agent AMI (from `det agent-image bake aws`)")
    _down_and_list(sub, "AWS")

    gcp = targets.add_parser("gcp", help="a cluster in a Google Cloud project (Pulumi)")
    sub = gcp.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("up", help="create or update the cluster")
    _up_common(p)
    p.add_argument("--project-id", required=True)
    p.add_argument("--zone", required=True, help="a zone of --region for the master and agents")
    p.add_argument("--master-machine-type", metavar="TYPE")
    p.add_argument("--gpu-agent-machine-type", action="append", metavar="TYPE",
                   help="a machine type agents may use (repeatable)")
    p.add_argument("--gpu-type", metavar="TYPE", help="accelerator type of the agents (default nvidia-tesla-t4)")
    p.add_argument("--gpus-per-agent", type=int, metavar="N")
    p.add_argument("--db", choices=("cloudsql", "local"), help="PostgreSQL on Cloud SQL or on the master")
    p.add_argument("--add-label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label on every resource")
    p.add_argument("--agent-image", metavar="IMAGE", help="the agent image (from `det agent-image bake gcp`)")
    _down_and_list(sub, "GCP")
