"""The master's boot script, run with bash: against a local metadata server (IMDSv2 on EC2, the
GCE metadata server), with a stub det-master that records how it was started; once with the real
det-master on SQLite, which must answer /info."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from controlplane.master.autoscaling.providers import provisioner_for
from controlplane.master.settings import load_settings
from infra.master_boot.render import render_master_boot
from infra.master_config import master_config, postgres_url
from tests.support.boot_simulator import MetadataServer
from tests.support.cluster import free_port, free_port_run, wait_for

TOKEN = "join-'token' $(touch /tmp/det-pwned) `x` \"y\""
PASSWORD = "p@ss/w'rd:%$x"


def _config(port: int = 8080, db_host: str = "db.internal", provider: dict | None = None) -> dict:
    provider = provider or {"type": "aws", "region": "us-west-2", "image_id": "ami-1", "instance_type": "g4dn.xlarge",
                            "max_instances": 3}
    return master_config(cluster_id="demo", port=port, db_url=postgres_url(db_host, PASSWORD),
                         checkpoint_storage={"type": "s3", "bucket": "demo-ckpt"}, pools={"gpu": provider})


@pytest.fixture
def imds():
    server = MetadataServer("aws", "i-0master")
    yield server
    server.stop()


@pytest.fixture
def gce_metadata():
    server = MetadataServer("gcp", "demo-master")
    yield server
    server.stop()


def test_aws_script_fills_public_url_from_imdsv2_and_starts_the_master(run_boot, imds):
    script = render_master_boot("aws", _config(), db="rds", db_password=PASSWORD, join_token=TOKEN)
    booted = run_boot(script, DET_METADATA_URL=imds.url)
    assert booted.rc == 0, booted.output
    # A session token first, then the address with it: an IMDSv1 GET would have been refused (401).
    assert imds.requests[0][:2] == ("PUT", "/latest/api/token")
    assert ("GET", "/latest/meta-data/local-ipv4", 200) in imds.requests
    assert booted.args == ["--config", str(booted.config_path)]
    config = booted.config()
    assert config["public_url"] == "http://127.0.0.1:8080"
    assert config["proxy_port"] == 8081  # the task proxy's own origin, opened to the same users
    assert config["db"]["url"] == postgres_url("db.internal", PASSWORD)  # rds: as rendered, no PostgreSQL setup
    assert config["security"]["join_token_file"] == str(booted.config_dir / "join-token")
    assert config["resource_pools"][0]["provider"]["image_id"] == "ami-1"


def test_secrets_are_written_0600_and_verbatim(run_boot, imds, tmp_path):
    script = render_master_boot("aws", _config(), db="rds", db_password=PASSWORD, join_token=TOKEN)
    booted = run_boot(script, DET_METADATA_URL=imds.url)
    assert booted.rc == 0, booted.output
    assert booted.mode("join-token") == 0o600
    assert booted.mode("master.yaml") == 0o600
    assert booted.mode(".") == 0o700
    assert (booted.config_dir / "join-token").read_text() == TOKEN
    assert not Path("/tmp/det-pwned").exists()  # the token's $(...) was never run
    settings = load_settings(booted.config_path)
    assert settings.join_token == TOKEN
    assert PASSWORD.replace("/", "%2F") not in booted.output and TOKEN not in booted.output


def test_gcp_script_asks_the_metadata_server_with_its_header(run_boot, gce_metadata):
    script = render_master_boot("gcp", _config(), db="cloudsql", db_password=PASSWORD, join_token=TOKEN)
    booted = run_boot(script, DET_METADATA_URL=gce_metadata.url)
    assert booted.rc == 0, booted.output
    assert ("GET", "/computeMetadata/v1/instance/network-interfaces/0/ip", 200) in gce_metadata.requests
    assert booted.config()["public_url"] == "http://127.0.0.1:8080"
    assert booted.config()["host"] == "0.0.0.0"  # the deployed master listens for agents and users


def test_overrides_skip_metadata_and_local_postgres(run_boot, imds):
    # db=local would install PostgreSQL; DET_MASTER_DB_URL replaces it (and db.url), as a local run needs.
    script = render_master_boot("aws", _config(db_host="127.0.0.1"), db="local", db_password=PASSWORD,
                                join_token=TOKEN)
    booted = run_boot(script, DET_METADATA_URL=imds.url, DET_MASTER_PUBLIC_URL="http://10.1.2.3:8080",
                      DET_MASTER_DB_URL="sqlite:////tmp/it's.db", DET_MASTER_DATA_DIR="/tmp/data",
                      DET_MASTER_HOST="127.0.0.1")
    assert booted.rc == 0, booted.output
    assert imds.requests == []
    config = booted.config()
    assert config["public_url"] == "http://10.1.2.3:8080"
    assert config["db"]["url"] == "sqlite:////tmp/it's.db"
    assert config["host"] == "127.0.0.1"
    assert booted.args[-2:] == ["--data-dir", "/tmp/data"]


def test_local_postgres_setup_gets_the_password_as_a_quoted_literal(run_boot):
    script = render_master_boot("aws", _config(db_host="127.0.0.1"), db="local", db_password=PASSWORD,
                                join_token=TOKEN)
    assert "ALTER ROLE determined WITH LOGIN PASSWORD ${DB_PASSWORD_SQL};" in script
    line = next(s.strip() for s in script.splitlines() if s.strip().startswith("DB_PASSWORD_SQL="))
    value = subprocess.run(["bash", "-c", f'{line}; printf %s "$DB_PASSWORD_SQL"'], capture_output=True, text=True)
    assert value.stdout == "'p@ss/w''rd:%$x'"  # what psql reads: one SQL string literal


def test_metadata_failure_stops_the_boot(run_boot):
    script = render_master_boot("aws", _config(), db="rds", db_password=PASSWORD, join_token=TOKEN)
    booted = run_boot(script, DET_METADATA_URL=f"http://127.0.0.1:{free_port()}")
    assert booted.rc != 0
    assert booted.args == []  # det-master never started with a config lacking its address


def test_render_refuses_unknown_cloud_and_db():
    with pytest.raises(ValueError, match="cloud"):
        render_master_boot("azure", _config(), db="rds", db_password="x", join_token="t")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="db"):
        render_master_boot("aws", _config(), db="mysql", db_password="x", join_token="t")  # type: ignore[arg-type]


def test_real_master_boots_from_the_script(tmp_path, imds):
    port = free_port_run(2)  # the boot config's proxy_port is port + 1 (infra/master_config.py)
    # The pool's EC2 endpoint is a closed local port, so the autoscaler's calls fail at once, offline.
    provider = {"type": "aws", "region": "us-west-2", "image_id": "ami-1", "instance_type": "g4dn.xlarge",
                "max_instances": 2, "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    config = _config(port=port, provider=provider)
    config["host"] = "127.0.0.1"  # tests listen on loopback only
    script_path = tmp_path / "boot.sh"
    script_path.write_text(render_master_boot("aws", config, db="local", db_password=PASSWORD, join_token=TOKEN))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "AWS_"))}
    env.update(DET_MASTER_BIN=str(Path(sys.executable).parent / "det-master"),
               DET_MASTER_CONFIG_DIR=str(tmp_path / "etc"), DET_METADATA_URL=imds.url,
               DET_MASTER_DB_URL=f"sqlite:///{tmp_path}/master.db", DET_MASTER_DATA_DIR=str(tmp_path / "data"),
               AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true")
    log = open(tmp_path / "master.log", "wb")  # closed below
    proc = subprocess.Popen(["bash", str(script_path)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def info() -> dict | None:
            assert proc.poll() is None, (tmp_path / "master.log").read_text()[-3000:]
            try:
                r = requests.get(f"http://127.0.0.1:{port}/info", timeout=2)
            except requests.ConnectionError:
                return None
            return r.json() if r.ok else None

        body = wait_for(info, 90, "the booted master's /info")
        assert body["cluster_name"] == "demo"
        settings = load_settings(tmp_path / "etc" / "master.yaml")
        assert settings.public_url == f"http://127.0.0.1:{port}"
        assert type(provisioner_for(settings.pools[0])).__name__ == "Ec2Provisioner"
    finally:
        with contextlib.suppress(ProcessLookupError):  # it exited already: the failure above says why
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()
