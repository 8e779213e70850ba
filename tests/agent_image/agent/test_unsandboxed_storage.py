"""An agent without a sandbox (``--task-runtime process``) still has its tasks write their shared_fs
checkpoints into their allocation's staging directory (the only place the master publishes from), and
read the checkpoints they may restore from there, as the storage the core API builds from their config."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .conftest import AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of, start_task

TASK_PY = """\
import json, os
from controlplane.storage import from_config
config = json.load(open(os.path.join(os.environ["DET_INFO_DIR"], "trial.json")))["config"]
env_config = json.loads(os.environ["DET_EXPERIMENT_CONFIG"])
storage = from_config(config["checkpoint_storage"], "unused")  # as core.init does with local-process
with storage.store_path("0123abcd-new") as path:
    open(os.path.join(path, "state.pt"), "w").write("new weights")
with storage.restore_path("4567cdef-old") as path:
    restored = open(os.path.join(path, "state.pt")).read()
print("REPORT " + json.dumps({"host_path": config["checkpoint_storage"]["host_path"],
                              "env_host_path": env_config["checkpoint_storage"]["host_path"],
                              "restored": restored}))
"""


async def test_an_unsandboxed_task_writes_into_its_staging_directory(
        master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    host = tmp_path / "checkpoints"
    (host / "team" / "4567cdef-old").mkdir(parents=True)
    (host / "team" / "4567cdef-old" / "state.pt").write_text("published weights")
    start_agent(master, "--task-runtime", "process")
    await master.wait_until(lambda: master.registers)
    msg = start_task(master, "u1", ["python3", "task.py"], files={"task.py": TASK_PY})
    storage = {"type": "shared_fs", "host_path": str(host), "storage_path": "team"}
    msg.trial_info = {"trial_id": 7, "experiment_id": 3, "config": {"checkpoint_storage": storage}}
    msg.env["DET_EXPERIMENT_CONFIG"] = json.dumps({"checkpoint_storage": storage})
    msg.env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    msg.readable_checkpoints = ["4567cdef-old"]
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, "u1"))
    lines = [ln.message for ln in lines_of(master, "u1")]
    assert done.exit_code == 0, "\n".join(lines)
    report = json.loads(next(m for m in lines if m.startswith("REPORT "))[len("REPORT "):])

    staging = host / ".staging" / "u1"
    assert report == {"host_path": str(staging), "env_host_path": str(staging), "restored": "published weights"}
    assert (staging / "team" / "0123abcd-new" / "state.pt").read_text() == "new weights"  # where the master looks
    assert not (host / "team" / "0123abcd-new").exists()  # never written in place
    assert os.path.islink(staging / "team" / "4567cdef-old")  # what it reads is a link, which is never published
