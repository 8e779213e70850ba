"""`det deploy aws|gcp up --dry-run`: the program under Pulumi's mocks, no engine, no cloud.

`preview(cloud, options)` runs `infra.<cloud>.program.build` with a `Mocks` that records every
resource the program registers (type, name, inputs) and answers with plausible ids and outputs
(ARNs, addresses, emails), with placeholder secrets in the stack config. Each resource comes back
with the settings a reviewer checks before saying yes: who may reach what (ingress rules, firewall
source ranges), IMDSv2, encryption, public access, IAM policy actions. `format_preview` prints them.
Safe to call from a plain process (it brings its own event loop) and from async code (it then
runs in a thread of its own).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from infra.dry_run_settings import settings_of
from infra.options import AwsOptions, GcpOptions
from infra.stack_config import DB_PASSWORD, JOIN_TOKEN

PROJECT = "det-deploy"
PLACEHOLDER_SECRETS = {JOIN_TOKEN: "dry-run-join-token", DB_PASSWORD: "dry-run-db-password"}
ACCOUNT = "123456789012"  # AWS's documentation account id


@dataclass(frozen=True)
class PlannedResource:
    type: str  # Pulumi's type token, e.g. "aws:ec2/instance:Instance"
    name: str
    settings: dict[str, Any]  # the security-relevant ones, for people
    inputs: dict[str, Any] = field(repr=False)  # every input, secrets unwrapped (placeholders in a dry run)
    secrets: tuple[str, ...] = ()  # dotted paths of the inputs that are Pulumi secrets
    id: str = ""  # what the mocks answered (a dry run's ids and outputs are made up)
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def short_type(self) -> str:
        """"aws:ec2/instance:Instance" -> "aws:ec2:Instance"."""
        pkg, _, rest = self.type.partition(":")
        module, _, kind = rest.partition(":")
        return f"{pkg}:{module.split('/')[0]}:{kind}" if kind else self.type


@dataclass(frozen=True)
class Preview:
    resources: list[PlannedResource]
    outputs: dict[str, Any]


def _unwrap(value: Any, path: str, secrets: list[str]) -> Any:
    from pulumi.runtime import rpc

    if rpc.is_rpc_secret(value):
        secrets.append(path)
        return _unwrap(rpc.unwrap_rpc_secret(value), path, secrets)
    if isinstance(value, dict):
        return {k: _unwrap(v, f"{path}.{k}" if path else k, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v, f"{path}[{i}]", secrets) for i, v in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire has only doubles: ports and sizes come back as 8080.0
    return value


def _named(value: Any, names: dict[str, str]) -> Any:
    """Mock ids in settings (a security group a rule refers to) shown as the resource's name."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, dict):
        return {k: _named(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_named(v, names) for v in value]
    return value


def _recorder(region: str, project: str | None) -> Any:
    import pulumi

    from infra.dry_run_outputs import mock_call, mock_outputs

    class Recorder(pulumi.runtime.Mocks):
        def __init__(self) -> None:
            self.resources: list[PlannedResource] = []
            self.names: dict[str, str] = {}  # mock id -> resource name
            self._lock = threading.Lock()

        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
            if not args.custom and not args.typ.startswith("pulumi:providers:"):
                return None, {}  # a component: nothing of its own is created
            secrets: list[str] = []
            inputs = _unwrap(dict(args.inputs), "", secrets)
            resource_id, outputs = mock_outputs(args.typ, args.name, inputs, region=region, project=project,
                                                account=ACCOUNT)
            with self._lock:
                self.resources.append(PlannedResource(args.typ, args.name, settings_of(args.typ, inputs), inputs,
                                                      tuple(secrets), resource_id, outputs))
                self.names[resource_id] = args.name
            return resource_id, {**args.inputs, **outputs}

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
            return mock_call(args.token, dict(args.args), region=region, project=project), []

    return Recorder()


def _run(cloud: str, options: AwsOptions | GcpOptions,
         config: dict[str, str] | None = None) -> Preview:
    import pulumi
    from pulumi.runtime import mocks, settings, stack

    if cloud == "aws" and isinstance(options, AwsOptions):
        from infra.aws.program import build as build_aws

        recorder = _recorder(options.region, None)
        program: Any = lambda: build_aws(options)  # noqa: E731
    elif cloud == "gcp" and isinstance(options, GcpOptions):
        from infra.gcp.program import build as build_gcp

        recorder = _recorder(options.region, options.project_id)
        program = lambda: build_gcp(options)  # noqa: E731
    else:
        raise ValueError(f"cloud must be aws (with AwsOptions) or gcp (with GcpOptions), got {cloud!r}")

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    outputs: dict[str, Any] = {}
    try:
        settings.SETTINGS.rpc_manager.clear()
        settings.SETTINGS.outputs.clear()
        settings.ROOT.set(None)  # a fresh stack per preview, also after one ran in this process
        mocks.set_mocks(recorder, project=PROJECT, stack=f"{cloud}-dry-run", preview=False)
        values = {**PLACEHOLDER_SECRETS, **(config or {})}
        pulumi.runtime.set_all_config({f"{PROJECT}:{k}": v for k, v in values.items()},
                                      [f"{PROJECT}:{k}" for k in PLACEHOLDER_SECRETS])

        def run() -> None:
            program()

        loop.run_until_complete(stack.run_pulumi_func(run))
        exported = getattr(settings.get_root_resource(), "outputs", None)  # the Stack's pulumi.export()s
        if exported is not None:
            outputs = loop.run_until_complete(_resolve(exported))
    finally:
        pulumi.runtime.set_all_config({}, [])
        loop.close()
        asyncio.set_event_loop(None)
    resources = [replace(r, settings=_named(r.settings, recorder.names)) for r in recorder.resources]
    return Preview(sorted(resources, key=lambda r: (r.short_type, r.name)), outputs)


async def _resolve(outputs: Any) -> dict[str, Any]:
    import pulumi

    resolved = await pulumi.Output.from_input(outputs).future()
    return dict(resolved or {})


def preview_with_outputs(cloud: str, options: AwsOptions | GcpOptions,
                         config: dict[str, str] | None = None) -> Preview:
    """The resources and the stack outputs (master_url, bucket, agent_image) the mocks produce;
    `config`: stack settings beside the placeholder secrets (`infra/stack_config.py`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        return _run(cloud, options, config)
    # Called from async code: Pulumi needs a loop of its own, so it gets a thread of its own.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_run, cloud, options, config).result()


def preview(cloud: str, options: AwsOptions | GcpOptions) -> list[PlannedResource]:
    return preview_with_outputs(cloud, options).resources


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _lines(settings: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, value in settings.items():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value) and len(value) > 1:
            lines.extend(f"{key}: {v}" for v in value)  # policy statements, one a line
        else:
            lines.append(f"{key}={_cell(value)}")
    return lines or ["-"]


def format_preview(resources: list[PlannedResource]) -> str:
    """A table: type, name, then one security-relevant setting per line."""
    rows = [(r.short_type, r.name, _lines(r.settings)) for r in resources]
    tw = max([len("TYPE"), *(len(t) for t, _, _ in rows)])
    nw = max([len("NAME"), *(len(n) for _, n, _ in rows)])
    lines = [f"{'TYPE':<{tw}}  {'NAME':<{nw}}  SETTINGS"]
    for t, n, settings in rows:
        lines.append(f"{t:<{tw}}  {n:<{nw}}  {settings[0]}")
        lines.extend(f"{'':<{tw}}  {'':<{nw}}  {s}" for s in settings[1:])
    lines.append(f"{len(resources)} resources")
    return "\n".join(lines)
