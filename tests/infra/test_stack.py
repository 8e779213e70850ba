"""The engine behind `det deploy aws|gcp`: the update flow and its replacement guard (over a fake
stack implementing the DeploymentStack Protocol), the state backend's files, and the missing
Pulumi CLI (absent on this machine)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

import pytest

from infra.engine.backend import backend_for
from infra.engine.errors import PulumiMissing, Refused
from infra.engine.model import DB_SETTING, JOIN_TOKEN, ResourceChange
from infra.engine.pulumi_engine import PulumiEngine, secrets_to_add
from infra.engine.update import UpPolicy, bring_up
from infra.options import OptionError

RDS = "aws:rds/instance:Instance"
MASTER = "aws:ec2/instance:Instance"
SG = "aws:ec2/securityGroup:SecurityGroup"


class FakeStack:
    """A stack with a scripted preview; records what was called."""

    def __init__(self, existed: bool, plan: list[ResourceChange], config: dict[str, str] | None = None) -> None:
        self.name = "demo"
        self.existed = existed
        self.plan = plan
        self.config = dict(config or {})
        self.secrets: dict[str, str] = {}
        self.calls: list[str] = []

    def settings(self) -> dict[str, str]:
        return dict(self.config)

    def set_settings(self, values: Mapping[str, str]) -> None:
        self.config.update(values)

    def ensure_secrets(self) -> list[str]:
        missing = secrets_to_add(set(self.secrets), "controlplane-aws")
        self.secrets.update(missing)
        return list(missing)

    def preview(self) -> list[ResourceChange]:
        self.calls.append("preview")
        return self.plan

    def up(self, on_output: Any) -> dict[str, Any]:
        self.calls.append("up")
        return {"master_url": "http://203.0.113.9:8080"}

    def destroy(self, on_output: Any) -> None:
        self.calls.append("destroy")

    def outputs(self) -> dict[str, Any]:
        return {}


def replace(type_: str, name: str) -> list[ResourceChange]:
    # Pulumi reports one replacement as several steps.
    return [ResourceChange("create-replacement", type_, name), ResourceChange("replace", type_, name),
            ResourceChange("delete-replaced", type_, name)]


def up(stack: FakeStack, db: str = "rds", *, yes: bool = False, allow: bool = False,
       answers: list[bool] | None = None) -> tuple[list[str], list[tuple[str, str | None]]]:
    said: list[str] = []
    asked: list[tuple[str, str | None]] = []

    def confirm(question: str, expected: str | None) -> bool:
        asked.append((question, expected))
        return (answers or [False]).pop(0)

    bring_up(stack, db_mode=db, settings={"aws:region": "us-east-1"},
             policy=UpPolicy(assume_yes=yes, allow_db_replace=allow), confirm=confirm, say=said.append)
    return said, asked


def test_a_new_stack_gets_its_secrets_once_and_no_preview():
    stack = FakeStack(existed=False, plan=[])
    said, asked = up(stack)
    assert stack.calls == ["up"] and asked == []
    first = dict(stack.secrets)
    assert set(first) == {"joinToken", "dbPassword"} and all(len(v) >= 32 for v in first.values())
    assert not any(v in line for v in first.values() for line in said)  # never printed
    stack.existed = True
    up(stack)
    assert stack.secrets == first  # never regenerated
    assert stack.config == {"aws:region": "us-east-1", DB_SETTING: "rds"}


def test_replacing_the_rds_database_is_refused_even_with_yes():
    stack = FakeStack(existed=True, plan=replace(RDS, "demo-db") + replace(SG, "demo-master-sg"),
                      config={DB_SETTING: "rds"})
    with pytest.raises(Refused, match="--allow-db-replace"):
        up(stack, yes=True)
    assert "up" not in stack.calls
    assert stack.config[DB_SETTING] == "rds"


def test_replacing_the_database_goes_on_with_allow_db_replace_and_lists_what_is_replaced():
    stack = FakeStack(existed=True, plan=replace(RDS, "demo-db") + replace(SG, "demo-master-sg"),
                      config={DB_SETTING: "rds"})
    said, asked = up(stack, allow=True)
    assert stack.calls == ["preview", "up"] and asked == []
    listed = [line for line in said if line.startswith("  ")]
    assert len(listed) == 2 and any("demo-db" in line for line in listed) and any("demo-master-sg" in line
                                                                                  for line in listed)


def test_an_interactive_user_confirms_the_database_by_typing_the_cluster_id():
    stack = FakeStack(existed=True, plan=replace(RDS, "demo-db"), config={DB_SETTING: "rds"})
    _said, asked = up(stack, answers=[True])
    assert asked[0][1] == "demo" and stack.calls[-1] == "up"


def test_with_a_local_database_replacing_the_master_instance_loses_it():
    stack = FakeStack(existed=True, plan=replace(MASTER, "demo-master"), config={DB_SETTING: "local"})
    with pytest.raises(Refused, match="database"):
        up(stack, db="local", yes=True)
    # With RDS the master holds no data: --yes is enough.
    stack = FakeStack(existed=True, plan=replace(MASTER, "demo-master"), config={DB_SETTING: "rds"})
    up(stack, yes=True)
    assert stack.calls[-1] == "up"


def test_switching_rds_to_local_deletes_the_database_and_needs_confirming():
    stack = FakeStack(existed=True, plan=[ResourceChange("delete", RDS, "demo-db")], config={DB_SETTING: "rds"})
    with pytest.raises(Refused):
        up(stack, db="local", yes=True)


def test_other_replacements_need_yes_or_a_yes_answer():
    stack = FakeStack(existed=True, plan=replace(SG, "demo-master-sg"), config={DB_SETTING: "rds"})
    with pytest.raises(Refused, match="--yes"):
        up(stack)
    up(stack, yes=True)
    assert stack.calls[-1] == "up"


def test_an_update_without_replacements_asks_nothing():
    stack = FakeStack(existed=True, plan=[ResourceChange("update", SG, "demo-master-sg")],
                      config={DB_SETTING: "rds"})
    _said, asked = up(stack)
    assert asked == [] and stack.calls == ["preview", "up"]


def test_secrets_already_in_the_stack_config_are_kept():
    assert secrets_to_add({f"controlplane-aws:{JOIN_TOKEN}"}, "controlplane-aws").keys() == {"dbPassword"}


def test_the_local_backend_and_passphrase_are_private(tmp_path, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    backend = backend_for(None, root=tmp_path / "pulumi")
    assert backend.url == f"file://{tmp_path / 'pulumi' / 'state'}"
    env = backend.env()
    passphrase = env["PULUMI_CONFIG_PASSPHRASE_FILE"]
    assert stat.S_IMODE(os.stat(passphrase).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "pulumi").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "pulumi" / "state").st_mode) == 0o700
    first = open(passphrase).read()
    assert backend.env()["PULUMI_CONFIG_PASSPHRASE_FILE"] == passphrase and open(passphrase).read() == first


def test_a_state_bucket_must_be_s3_or_gs(tmp_path):
    assert backend_for("s3://team-state/", root=tmp_path).url == "s3://team-state"
    with pytest.raises(OptionError, match="--state-bucket"):
        backend_for("https://example.com/state", root=tmp_path)


def test_without_the_pulumi_cli_opening_a_stack_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `pulumi` here (nor on this machine at all)
    engine = PulumiEngine("aws", backend_for(None, root=tmp_path / "pulumi"))
    with pytest.raises(PulumiMissing, match=r"curl -fsSL https://get.pulumi.com \| sh"):
        engine.open("demo", None, create=True)
    with pytest.raises(PulumiMissing, match="https://www.pulumi.com/docs/install/"):
        engine.list()
