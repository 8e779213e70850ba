"""launchers.horovod: Horovod does not install here, so the launcher stops at start naming the
missing package and the command it would run; the command and the worker variables are checked."""

from __future__ import annotations

import importlib.util
import shlex
import sys

import pytest

from launchers import _cluster, _worker, horovod
from tests.launchers.conftest import finish, launcher_env, start, write_info


def test_the_horovodrun_command(tmp_path):
    info = write_info(tmp_path / "info", counts=(2, 2), ports={"chief": 21000, "dist": [21001, 21002],
                                                                "ssh": [0, 21003]})
    gang = _cluster.load({"DET_INFO_DIR": str(info)})
    own, overrides, script = _cluster.split_overrides(["--fusion-threshold-mb", "8", "--", "train.py", "--x"])
    assert horovod.horovodrun_command(gang, overrides, _cluster.worker_command(own, script, horovod.PROG)) == [
        "horovodrun", "-np", "4", "-H", "det-container-0:2,det-container-1:2", "--start-timeout", "600",
        "--fusion-threshold-mb", "8", sys.executable, "-m", "launchers._worker", "horovod", "--",
        sys.executable, "train.py", "--x"]
    assert gang.ssh_hosts()["det-container-1"] == {"addr": "127.0.0.1", "port": 21003, "self": False}
    assert horovod.gang_env(gang)["DET_DIST_PORTS"] == "21001,21002"


def test_worker_env_from_horovods_names():
    env = _worker.fill_env("horovod", {"HOROVOD_RANK": "3", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_SIZE": "4",
                                       "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "1",
                                       "HOROVOD_CROSS_SIZE": "2", "DET_CHIEF_IP": "10.0.0.1"})
    assert [env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "GROUP_WORLD_SIZE", "MASTER_ADDR")] == ["3", "1", "4", "2", "1", "2", "10.0.0.1"]


@pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason="horovod is installed here")
def test_without_horovod_it_stops_at_start_and_says_what_it_would_run(tmp_path):
    info = write_info(tmp_path / "info", counts=(2,))
    code, out, err = finish(start("launchers.horovod", ["--trial", "model_def:MyTrial"], launcher_env(info),
                                  tmp_path), timeout=60)
    assert code == 1 and out == ""
    assert "launchers.horovod: the 'horovod' package is not installed (pip install horovod)" in err
    would = shlex.split(err.split("it would run: ", 1)[1])
    assert would == ["horovodrun", "-np", "2", "-H", "det-container-0:2", "--start-timeout", "600",
                     sys.executable, "-m", "launchers._worker", "horovod", "--",
                     sys.executable, "-m", "controlplane.exec.harness", "model_def:MyTrial"]
