"""The image's boot script (`files/det-image-boot.sh`) fetches the instance's user data from the
metadata server (the boot simulator's, IMDSv2 on EC2, Metadata-Flavor on GCE) and runs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent_image.bake.steps import FILES
from tests.support.boot_simulator import MetadataServer

BOOT = FILES / "det-image-boot.sh"
USER_DATA = '#!/bin/bash\necho "ran as the user data with metadata at $DET_METADATA_URL" > "$OUT/ran"\n'


def _boot(tmp_path: Path, cloud: str, server: MetadataServer) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DET_IMAGE_CLOUD": cloud, "DET_METADATA_URL": server.url,
           "DET_IMAGE_BOOT_DIR": str(tmp_path / "run"), "OUT": str(tmp_path)}
    return subprocess.run(["bash", str(BOOT)], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_the_boot_script_runs_the_instances_user_data(tmp_path: Path, cloud: str) -> None:
    server = MetadataServer(cloud, "i-0abc", user_data=USER_DATA)
    try:
        done = _boot(tmp_path, cloud, server)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").read_text() == f"ran as the user data with metadata at {server.url}\n"
    if cloud == "aws":  # IMDSv2: a token first, and the user data read with it
        assert [(m, p, s) for m, p, s in server.requests] == [
            ("PUT", "/latest/api/token", 200), ("GET", "/latest/user-data", 200)]
    assert oct((tmp_path / "run" / "user-data.sh").stat().st_mode & 0o777) == "0o600"  # it holds the join token


def test_an_instance_without_user_data_fails_with_a_message(tmp_path: Path) -> None:
    server = MetadataServer("aws", "i-0abc")
    try:
        done = _boot(tmp_path, "aws", server)
    finally:
        server.stop()
    assert done.returncode == 1
    assert "could not read the instance's boot script" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_an_unknown_cloud_is_refused(tmp_path: Path) -> None:
    server = MetadataServer("aws", "i-0abc", user_data=USER_DATA)
    try:
        done = _boot(tmp_path, "azure", server)
    finally:
        server.stop()
    assert done.returncode == 2 and "must be aws or gcp" in done.stderr
