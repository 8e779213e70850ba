"""Fixtures: an isolated environment (own token store, no DET_* leaking in), the fake master,
and `det` run in-process so output and exit codes are checked without subprocess overhead."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import yaml

from controlplane.cli.main import main
from tests.controlplane.cli.fake_master import FakeMaster
from tests.controlplane.cli.real_master import RealMaster


@dataclass
class Result:
    rc: int
    out: str
    err: str


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for var in ("DET_MASTER", "DET_MASTER_ADDR", "DET_USER", "DET_PASS", "DET_USER_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def fake_master(cli_env, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMaster]:
    with FakeMaster() as fm:
        monkeypatch.setenv("DET_MASTER", fm.url)
        yield fm


@pytest.fixture
def real_master(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[RealMaster]:
    """The master's own app on SQLite, served from a thread: for commands tested end to end."""
    with RealMaster(tmp_path / "master") as master:
        monkeypatch.setenv("DET_MASTER", master.url)
        yield master


@pytest.fixture
def det(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse usage errors
            rc = int(e.code or 0)
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


def _stub_config_modules() -> dict[str, types.ModuleType]:
    """Stand-ins for controlplane.config.* while a colleague is still writing them."""

    class ConfigError(Exception):
        def __init__(self, field: str, rule: str) -> None:
            super().__init__(f"{field}: {rule}" if field else rule)

    def load_yaml(text: str, source: str = "") -> dict:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError("", f"{source}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError("", f"{source}: must be a mapping")
        return data

    def apply_overrides(cfg: dict, items: list[str]) -> dict:
        out = yaml.safe_load(yaml.safe_dump(cfg))
        for item in items:
            key, _, value = item.partition("=")
            node = out
            *parents, last = key.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = yaml.safe_load(value)
        return out

    def parse_experiment_config(raw: dict) -> dict:
        if "entrypoint" not in raw:
            raise ConfigError("entrypoint", "required")
        searcher = raw.get("searcher") or {}
        if searcher.get("name") not in ("single", "random", "grid", "adaptive_asha", "custom"):
            raise ConfigError("searcher.name", f"unknown searcher {searcher.get('name')!r}")
        return raw

    errors = types.ModuleType("controlplane.config.errors")
    errors.ConfigError = ConfigError  # type: ignore[attr-defined]
    yaml_io = types.ModuleType("controlplane.config.yaml_io")
    yaml_io.load_yaml = load_yaml  # type: ignore[attr-defined]
    yaml_io.apply_overrides = apply_overrides  # type: ignore[attr-defined]
    experiment = types.ModuleType("controlplane.config.experiment")
    experiment.parse_experiment_config = parse_experiment_config  # type: ignore[attr-defined]
    return {"controlplane.config.errors": errors, "controlplane.config.yaml_io": yaml_io,
            "controlplane.config.experiment": experiment}


@pytest.fixture
def config_modules(monkeypatch: pytest.MonkeyPatch) -> bool:
    """True when the real config modules are used, False when stubs were installed."""
    try:
        import controlplane.config.errors
        import controlplane.config.experiment
        import controlplane.config.yaml_io  # noqa: F401
        return True
    except ImportError:
        for name, module in _stub_config_modules().items():
            monkeypatch.setitem(sys.modules, name, module)
        return False
