"""`det deploy aws|gcp` through the CLI entry point: dry run, flag errors, the missing Pulumi CLI,
and `up`'s output over a fake engine (the real one needs the Pulumi CLI, absent here)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.cli import deploy_cloud
from infra.engine.model import StackInfo
from infra.preflight import Report
from tests.infra.test_stack import FakeStack

pytestmark = pytest.mark.timeout(120)
AWS_UP = ["deploy", "aws", "up", "--cluster-id", "demo", "--region", "us-east-1", "--inbound-cidr", "203.0.113.7/32"]
GCP_UP = ["deploy", "gcp", "up", "--cluster-id", "demo", "--project-id", "proj-1", "--region", "us-central1",
          "--zone", "us-central1-a", "--inbound-cidr", "203.0.113.7/32"]


@pytest.fixture
def no_pulumi(cli_env, monkeypatch, tmp_path):
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None if name == "pulumi" else "/usr/bin/" + name)


@pytest.mark.parametrize("argv", [AWS_UP, ["deploy", "aws", "down", "--cluster-id", "demo", "--yes"],
                                  GCP_UP, ["deploy", "gcp", "down", "--cluster-id", "demo"],
                                  ["deploy", "aws", "list"]])
def test_without_the_pulumi_cli_up_down_and_list_say_how_to_install_it(det, no_pulumi, argv):
    r = det(*argv)
    assert r.rc == 1
    assert r.err.startswith("Error: the Pulumi CLI is not installed")
    assert "curl -fsSL https://get.pulumi.com | sh" in r.err and "https://www.pulumi.com/docs/install/" in r.err


@pytest.mark.parametrize("argv, flag", [
    (AWS_UP[:-2] + ["--inbound-cidr", "10.0.0.1/8"], "--inbound-cidr"),
    (AWS_UP[:-2], "--inbound-cidr"),
    (["deploy", "aws", "up", "--cluster-id", "Demo_1", "--region", "us-east-1", "--inbound-cidr", "10.0.0.0/8"],
     "--cluster-id"),
    (AWS_UP + ["--max-dynamic-agents", "5000"], "--max-dynamic-agents"),
    (AWS_UP + ["--add-tag", "novalue"], "--add-tag"),
    (GCP_UP[:9] + ["--zone", "europe-west4-a"] + GCP_UP[11:], "--zone"),
    (GCP_UP + ["--add-label", "det-deployment=x"], "--add-label"),
    (AWS_UP + ["--state-bucket", "ftp://x"], "--state-bucket"),
])
def test_a_bad_flag_is_exit_2_naming_the_flag(det, cli_env, argv, flag, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: "/usr/bin/" + name)  # reach the --state-bucket check
    monkeypatch.setattr(deploy_cloud, "_preflight", lambda *_: pytest.fail("preflight ran on bad flags"))
    r = det(*argv)
    assert r.rc == 2, (r.out, r.err)
    assert r.err.startswith(f"Error: {flag}: "), r.err


def test_argparse_rejects_a_non_number_naming_the_flag(det, cli_env):
    r = det(*AWS_UP, "--max-dynamic-agents", "many")
    assert r.rc == 2 and "argument --max-dynamic-agents: invalid int value: 'many'" in r.err


def test_dry_run_prints_the_resources_with_the_given_cidr_and_nothing_open_to_the_world(det, no_pulumi):
    r = det(*AWS_UP, "--dry-run")
    assert r.rc == 0, r.err
    ingress = [line for line in r.out.splitlines() if "ingress" in line.lower()]
    assert any("203.0.113.7/32" in line for line in ingress), r.out
    assert not [line for line in ingress if "0.0.0.0/0" in line], ingress
    assert "aws:ec2:Instance" in r.out or "aws:ec2/instance:Instance" in r.out


def test_gcp_dry_run_works_without_credentials_or_pulumi(det, no_pulumi, monkeypatch):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    r = det(*GCP_UP, "--dry-run")
    assert r.rc == 0, r.err
    assert "203.0.113.7/32" in r.out
    firewall_lines = [line for line in r.out.splitlines() if "source" in line.lower()]
    assert not [line for line in firewall_lines if "0.0.0.0/0" in line], firewall_lines


class FakeEngine:
    def __init__(self, stack: FakeStack | None) -> None:
        self.stack = stack
        self.backend = type("B", (), {"url": "file:///tmp/state"})()
        self.opened: list[tuple[str, bool]] = []

    def open(self, cluster_id: str, program: Any, *, create: bool) -> FakeStack | None:
        self.opened.append((cluster_id, create))
        return self.stack

    def list(self) -> list[StackInfo]:
        return [StackInfo("demo", "2026-11-02T10:00:00", 31, False,
                          {"master_url": "http://203.0.113.9:8080", "bucket": "demo-ckpt-1"})]


def test_up_runs_preflight_then_the_stack_and_ends_with_the_url_and_how_to_log_in(det, cli_env, monkeypatch):
    engine = FakeEngine(FakeStack(existed=False, plan=[]))
    checked: list[Any] = []
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: engine)
    monkeypatch.setattr("infra.preflight.aws.check", lambda opts: checked.append(opts) or Report(
        warnings=["Could not read the quota; it was not checked."]))
    r = det(*AWS_UP, "--gpu-agent-instance-type", "g5.xlarge", "--spot", "--db", "rds")
    assert r.rc == 0, r.err
    assert checked[0].gpu_agent_instance_types == ("g5.xlarge",) and checked[0].spot and checked[0].db == "rds"
    assert engine.opened == [("demo", True)]
    assert "Warning: Could not read the quota" in r.err
    assert "det -m http://203.0.113.9:8080 user login admin" in r.out
    assert engine.stack is not None and engine.stack.config["aws:region"] == "us-east-1"


def test_up_stops_before_creating_anything_when_preflight_fails_and_lists_every_failure(det, cli_env, monkeypatch):
    engine = FakeEngine(FakeStack(existed=False, plan=[]))
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: engine)
    monkeypatch.setattr("infra.preflight.aws.check", lambda opts: Report(failures=["First problem.",
                                                                                   "Second problem."]))
    r = det(*AWS_UP)
    assert r.rc == 1
    assert "  - First problem.\n  - Second problem." in r.err and "nothing was created" in r.err
    assert engine.opened == []


def test_down_without_yes_and_without_a_terminal_changes_nothing(det, cli_env, monkeypatch):
    stack = FakeStack(existed=True, plan=[])
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(stack))
    monkeypatch.setattr(deploy_cloud, "_teardown", lambda *a: pytest.fail("cleaned up without confirmation"))
    r = det("deploy", "aws", "down", "--cluster-id", "demo")
    assert r.rc == 1 and "not confirmed" in r.err
    assert "destroy" not in stack.calls


def test_down_cleans_up_then_destroys(det, cli_env, monkeypatch):
    from infra.teardown import TeardownReport

    stack = FakeStack(existed=True, plan=[], config={"aws:region": "us-east-1"})
    order: list[str] = []
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(stack))
    monkeypatch.setattr(deploy_cloud, "_teardown", lambda cloud, cid, settings: order.append(
        f"teardown {cid} {settings['aws:region']}") or TeardownReport(master_stopped=["i-1"], terminated=["i-2"]))
    r = det("deploy", "aws", "down", "--cluster-id", "demo", "--yes")
    assert r.rc == 0, r.err
    assert order == ["teardown demo us-east-1"] and stack.calls == ["destroy"]
    assert "Stopped the master: i-1." in r.out and "Terminated agents: i-2." in r.out


def test_down_of_an_unknown_cluster_says_so(det, cli_env, monkeypatch):
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(None))
    r = det("deploy", "gcp", "down", "--cluster-id", "nope", "--yes")
    assert r.rc == 1 and "no deployment 'nope'" in r.err


def test_list_is_a_table_and_json(det, cli_env, monkeypatch):
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(None))
    r = det("deploy", "aws", "list")
    assert r.rc == 0 and "demo" in r.out and "http://203.0.113.9:8080" in r.out and "cluster" in r.out
    r = det("deploy", "aws", "list", "--json")
    assert json.loads(r.out)[0]["outputs"]["bucket"] == "demo-ckpt-1"


def test_down_of_a_cluster_with_rds_refuses_before_touching_anything_without_delete_database(det, cli_env,
                                                                                          monkeypatch):
    stack = FakeStack(existed=True, plan=[], config={"aws:region": "us-east-1", "db": "rds"})
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(stack))
    monkeypatch.setattr(deploy_cloud, "_teardown", lambda *a: pytest.fail("agents terminated before the refusal"))
    r = det("deploy", "aws", "down", "--cluster-id", "demo", "--yes")
    assert r.rc == 1 and "keeps its database on RDS with deletion protection" in r.err and \
        "--delete-database" in r.err, r.err
    assert stack.calls == [] and "dbDeletionProtection" not in stack.config


def test_down_with_delete_database_switches_the_protection_off_then_destroys(det, cli_env, monkeypatch):
    from infra.teardown import TeardownReport

    stack = FakeStack(existed=True, plan=[], config={"aws:region": "us-east-1", "db": "rds"})
    monkeypatch.setattr(deploy_cloud, "_engine", lambda args: FakeEngine(stack))
    monkeypatch.setattr(deploy_cloud, "_teardown", lambda *a: stack.calls.append("teardown") or TeardownReport())
    r = det("deploy", "aws", "down", "--cluster-id", "demo", "--yes", "--delete-database")
    assert r.rc == 0, r.err
    assert stack.calls == ["teardown", "up", "destroy"] and stack.config["dbDeletionProtection"] == "false"
