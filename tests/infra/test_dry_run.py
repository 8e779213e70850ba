"""`det deploy aws|gcp up --dry-run`: the table a user reviews, and `preview` being callable from a
plain process, from async code, and more than once in one process."""

from __future__ import annotations

import pytest

from infra.dry_run import PLACEHOLDER_SECRETS, format_preview, preview
from infra.options import AwsOptions, GcpOptions

CIDR = "198.51.100.0/24"
AWS = AwsOptions(cluster_id="dry", region="eu-west-1", inbound_cidr=CIDR, db="rds", keypair="ops")
GCP = GcpOptions(cluster_id="dry", project_id="p", region="europe-west4", zone="europe-west4-a", inbound_cidr=CIDR)


def _row(table: str, name: str) -> list[str]:
    """The lines of one resource's row: its first line and the continuation lines under it."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if f"  {name}  " in line)
    indent = lines[start].index(name) + len(name)
    out = [lines[start]]
    for line in lines[start + 1:]:
        if line[:indent].strip():
            break
        out.append(line)
    return out


def test_aws_table_shows_what_a_reviewer_checks():
    table = format_preview(preview("aws", AWS))
    assert table.splitlines()[0].split() == ["TYPE", "NAME", "SETTINGS"]
    inbound = "\n".join(_row(table, "dry-master-port-inbound"))
    assert f'"peer":"{CIDR}"' in inbound and '"ports":"8080-8080"' in inbound
    master = "\n".join(_row(table, "dry-master"))
    assert "http_tokens=required" in master and "root_encrypted=true" in master and "user_data=[secret]" in master
    assert "sse_algorithm=aws:kms" in table and "restrict_public_buckets=true" in table
    assert "storage_encrypted=true" in table and "publicly_accessible=false" in table
    policy = _row(table, "dry-master-policy")
    assert any("ec2:TerminateInstances" in line and "aws:ResourceTag/det-deployment" in line for line in policy)
    assert '"peer":"dry-master-sg"' in table  # rules name the group they admit, not a made-up id
    assert "0.0.0.0/0" not in "\n".join(line for line in table.splitlines() if "ingress=" in line)
    assert table.splitlines()[-1].endswith("resources")


def test_gcp_table_shows_firewall_sources_and_bucket_settings():
    table = format_preview(preview("gcp", GCP))
    inbound = "\n".join(_row(table, "dry-master-inbound"))
    assert f'source_ranges=["{CIDR}"]' in inbound
    assert "public_access_prevention=enforced" in table and "uniform_access=true" in table
    assert "startup_script=[secret]" in table


def test_gcp_master_signs_in_through_os_login_only():
    """The master's metadata turns OS Login on (IAM decides who may SSH) and blocks project-wide keys."""
    master = next(r for r in preview("gcp", GCP) if r.type == "gcp:compute/instance:Instance")
    assert master.inputs["metadata"]["enable-oslogin"] == "TRUE"
    assert master.inputs["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert "os_login=TRUE" in "\n".join(_row(format_preview([master]), master.name))


def test_secret_values_never_reach_the_table():
    for cloud, opts in (("aws", AWS), ("gcp", GCP)):
        table = format_preview(preview(cloud, opts))
        for value in PLACEHOLDER_SECRETS.values():
            assert value not in table


def test_preview_runs_twice_in_one_process_with_the_same_plan():
    first = [(r.type, r.name) for r in preview("aws", AWS)]
    second = [(r.type, r.name) for r in preview("aws", AWS)]
    assert first == second and len(first) > 30


async def test_preview_from_async_code():
    resources = preview("gcp", GCP)  # a running loop here: preview takes a thread of its own
    assert any(r.type == "gcp:compute/instance:Instance" for r in resources)


def test_preview_refuses_a_cloud_it_does_not_know():
    with pytest.raises(ValueError, match="cloud"):
        preview("azure", AWS)
    with pytest.raises(ValueError, match="cloud"):
        preview("aws", GCP)
