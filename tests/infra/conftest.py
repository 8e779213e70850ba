"""Helpers for the infra tests: pick planned resources out of a dry run, and run a rendered master
boot script with bash against a stub det-master that records how it was started. moto's fixtures
(tests/infra/moto_fixtures.py) are registered here, so its one server serves every module."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.dry_run import PlannedResource
from tests.infra.moto_fixtures import moto_server, moto_url, session  # noqa: F401 (fixtures)


def of_type(resources: list[PlannedResource], typ: str) -> list[PlannedResource]:
    return [r for r in resources if r.type == typ]


def one(resources: list[PlannedResource], typ: str, name: str | None = None) -> PlannedResource:
    found = [r for r in of_type(resources, typ) if name is None or r.name == name]
    assert len(found) == 1, f"expected one {typ} {name or ''}, got {[r.name for r in found]}"
    return found[0]


def is_secret(resource: PlannedResource, path: str) -> bool:
    """The input at `path` reached the engine as a secret (itself, or inside a secret map)."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in resource.secrets for i in range(1, len(parts) + 1))


def policy(resource: PlannedResource, key: str = "policy") -> dict[str, Any]:
    return json.loads(resource.inputs[key])


@dataclass
class Booted:
    rc: int
    output: str
    config_dir: Path
    args: list[str]

    @property
    def config_path(self) -> Path:
        return self.config_dir / "master.yaml"

    def mode(self, name: str) -> int:
        return stat.S_IMODE((self.config_dir / name).stat().st_mode)

    def config(self) -> dict[str, Any]:
        import yaml

        return yaml.safe_load(self.config_path.read_text())


@pytest.fixture
def run_boot(tmp_path: Path):
    """run_boot(script, **env) -> Booted: the script under bash, det-master replaced by a stub."""
    stub = tmp_path / "det-master-stub"
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$STUB_ARGS"\n')
    stub.chmod(0o755)

    def run(script: str, **env: str) -> Booted:
        config_dir = tmp_path / "etc" / "controlplane"
        path = tmp_path / "boot.sh"
        path.write_text(script)
        args_file = tmp_path / "args"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "AWS_"))}
        full = {**clean, "DET_MASTER_BIN": str(stub), "DET_MASTER_CONFIG_DIR": str(config_dir),
                "STUB_ARGS": str(args_file), **env}
        proc = subprocess.run(["bash", str(path)], env=full, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        args = args_file.read_text().splitlines() if args_file.exists() else []
        return Booted(proc.returncode, proc.stdout + proc.stderr, config_dir, args)

    return run
