"""The Automation API implementation of `StackEngine` (Pulumi's inline programs, local workspace).

Every call into `pulumi.automation` goes through `_calling`, which turns the bare
`FileNotFoundError: 'pulumi'` of a missing CLI into `PulumiMissing` and Pulumi's `CommandError`
into an `EngineError` carrying the error diagnostics (the provider's own message). The stack's
config file lives in the backend's project folder, so its encrypted secrets outlive this run.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from typing import Any

from infra.engine.backend import Backend
from infra.engine.errors import EngineError, PulumiMissing, require_pulumi_cli
from infra.engine.model import (
    SECRETS,
    OnOutput,
    PulumiProgram,
    ResourceChange,
    StackInfo,
    project_name,
)

_PLUGINS = {"aws": ("aws", "pulumi_aws"), "gcp": ("gcp", "pulumi_gcp")}


def _noop_program() -> None:
    """`down` and `list` never run the program, but an inline stack must name one."""


@contextmanager
def _calling(errors: list[str] | None = None) -> Iterator[None]:
    from pulumi.automation import errors as auto_errors

    try:
        yield
    except FileNotFoundError as e:
        if "pulumi" in str(e):
            raise PulumiMissing() from e
        raise
    except auto_errors.CommandError as e:
        detail = "; ".join(dict.fromkeys(m.strip() for m in errors or [] if m.strip()))
        raise EngineError(detail or _last_error_line(str(e))) from e


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return (errors or lines or ["pulumi failed without a message"])[-1]


def secrets_to_add(config_keys: set[str], project: str) -> dict[str, str]:
    """The secrets a stack still lacks, freshly generated; an existing one is never replaced."""
    return {name: secrets.token_urlsafe(32) for name in SECRETS
            if name not in config_keys and f"{project}:{name}" not in config_keys}


class PulumiStack:
    def __init__(self, stack: Any, project: str, existed: bool) -> None:
        self._stack = stack
        self._project = project
        self.name: str = stack.name
        self.existed = existed

    def settings(self) -> dict[str, str]:
        with _calling():
            config = self._stack.get_all_config()
        prefix = f"{self._project}:"
        return {key.removeprefix(prefix): v.value for key, v in config.items() if not v.secret}

    def set_settings(self, values: Mapping[str, str]) -> None:
        from pulumi.automation import ConfigValue

        with _calling():
            self._stack.set_all_config({k: ConfigValue(value=v) for k, v in values.items()})

    def ensure_secrets(self) -> list[str]:
        from pulumi.automation import ConfigValue

        with _calling():
            missing = secrets_to_add(set(self._stack.get_all_config()), self._project)
            for key, value in missing.items():
                self._stack.set_config(key, ConfigValue(value=value, secret=True))
        return list(missing)

    def preview(self) -> list[ResourceChange]:
        changes: list[ResourceChange] = []
        errors: list[str] = []
        with _calling(errors):
            self._stack.preview(on_event=_collector(changes, errors), color="never", diff=False)
        return changes

    def up(self, on_output: OnOutput) -> dict[str, Any]:
        errors: list[str] = []
        with _calling(errors):
            result = self._stack.up(on_output=on_output, on_event=_collector([], errors), color=_color())
        return _shown(result.outputs)

    def destroy(self, on_output: OnOutput) -> None:
        errors: list[str] = []
        with _calling(errors):
            self._stack.destroy(on_output=on_output, on_event=_collector([], errors), color=_color())

    def outputs(self) -> dict[str, Any]:
        with _calling():
            return _shown(self._stack.outputs())


def _shown(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Stack outputs as they may be printed: a secret one as "[secret]"."""
    return {k: ("[secret]" if v.secret else v.value) for k, v in outputs.items()}


def _color() -> str:
    return "always" if sys.stdout.isatty() else "never"


def _collector(changes: list[ResourceChange], errors: list[str]) -> Callable[[Any], None]:
    """An `on_event` that records planned steps and the engine's error diagnostics."""

    def on_event(event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if pre is not None and pre.metadata is not None:
            m = pre.metadata
            op = getattr(m.op, "value", str(m.op))
            changes.append(ResourceChange(op=op, type=m.type, name=m.urn.rsplit("::", 1)[-1],
                                          replace_reasons=tuple(m.keys or ())))
        diag = getattr(event, "diagnostic_event", None)
        if diag is not None and diag.severity == "error":
            errors.append(diag.message)

    return on_event


class PulumiEngine:
    """Stacks of one cloud's project in one backend."""

    def __init__(self, cloud: str, backend: Backend) -> None:
        self.cloud = cloud
        self.project = project_name(cloud)
        self.backend = backend

    def _options(self, program: PulumiProgram) -> Any:
        from pulumi.automation import LocalWorkspaceOptions, ProjectBackend, ProjectSettings

        return LocalWorkspaceOptions(
            work_dir=str(self.backend.project_dir(self.project)),
            program=program,
            env_vars=self.backend.env(),
            secrets_provider="passphrase",
            project_settings=ProjectSettings(name=self.project, runtime="python",
                                             backend=ProjectBackend(url=self.backend.url)),
        )

    def open(self, cluster_id: str, program: PulumiProgram | None, *, create: bool) -> PulumiStack | None:
        require_pulumi_cli()
        from pulumi import automation as auto

        opts = self._options(program or _noop_program)
        with _calling():
            try:
                stack = auto.select_stack(cluster_id, project_name=self.project, program=program or _noop_program,
                                          opts=opts)
                existed = True
            except auto.StackNotFoundError:
                if not create:
                    return None
                stack = auto.create_stack(cluster_id, project_name=self.project, program=program or _noop_program,
                                          opts=opts)
                existed = False
            if program is not None:
                self._install_plugin(stack.workspace)
        return PulumiStack(stack, self.project, existed)

    def _install_plugin(self, workspace: Any) -> None:
        # Inline programs do not make the CLI fetch the provider plugin: ask for the version the
        # installed pulumi_<cloud> package was built against.
        plugin, package = _PLUGINS[self.cloud]
        workspace.install_plugin(plugin, "v" + metadata.version(package))

    def list(self) -> list[StackInfo]:
        require_pulumi_cli()
        from pulumi import automation as auto

        with _calling():
            ws = auto.LocalWorkspace(**self._options(_noop_program).__dict__)
            infos = []
            for s in ws.list_stacks():
                infos.append(StackInfo(name=s.name, resource_count=s.resource_count,
                                       last_update=s.last_update.isoformat() if s.last_update else None,
                                       update_in_progress=bool(s.update_in_progress),
                                       outputs=_shown(ws.stack_outputs(s.name))))
        return infos
