"""The rendered boot script starts the agent with the master, pool and a 0600 token file."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from agent_image.boot.render import render_boot_script


@pytest.mark.parametrize("kind, cloud", [("ec2-user-data", "aws"), ("gce-startup-script", "gcp")])
def test_boot_script_runs_the_agent(tmp_path, kind, cloud):
    fake_agent = tmp_path / "det-agent"
    fake_agent.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\n')
    fake_agent.chmod(0o755)
    script = tmp_path / "boot.sh"
    script.write_text(render_boot_script(kind, master_url="http://10.0.0.1:8080", join_token="s3cr'et",
                                         pool="gpu pool", extra_args=["--slots", "2"]))
    env = {**os.environ, "DET_AGENT_BIN": str(fake_agent), "DET_AGENT_CONFIG_DIR": str(tmp_path / "etc"),
           "DET_METADATA_URL": "http://127.0.0.1:9999", "DET_AGENT_WORK_DIR": str(tmp_path / "work")}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=30)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == ["--master", "http://10.0.0.1:8080"]
    assert args[args.index("--pool") + 1] == "gpu pool" and args[args.index("--cloud") + 1] == cloud
    assert args[args.index("--metadata-url") + 1] == "http://127.0.0.1:9999" and args[-2:] == ["--slots", "2"]
    token_file = tmp_path / "etc" / "join-token"
    assert token_file.read_text() == "s3cr'et"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert "s3cr" not in " ".join(args)  # never on the command line


def test_unknown_kind():
    with pytest.raises(ValueError, match="ec2-user-data"):
        render_boot_script("azure", master_url="x", join_token="t", pool="p")
