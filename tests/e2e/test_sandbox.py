"""A trial on a real local cluster (`det deploy local`, agents under bubblewrap): it runs as a
non-root user, sees Determined's /run/determined layout, cannot read the master's data dir or the
join token, and a checkpoint it writes through the core API to the shared_fs container path lands
in host_path, read-only with its digests, and downloads through the master."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile

import pytest
import requests
import yaml

from tests.support.cluster import login, wait_for

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

TRAIN_PY = """\
import json, os, sys
from controlplane import core

def readable(path):
    try:
        with open(path, "rb") as f:
            return len(f.read()) > 0
    except OSError:
        return False

data_dir, token_file = sys.argv[1], sys.argv[2]
seen = {
    "uid": os.getuid(),
    "cwd": os.getcwd(),
    "cluster_json": os.path.isfile("/run/determined/info/cluster.json"),
    "master_db": readable(os.path.join(data_dir, "master.db")),
    "join_token": readable(token_file),
}
print("SEEN " + json.dumps(seen))
with core.init() as ctx:
    for op in ctx.searcher.operations():
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "weights.bin").write_bytes(b"w" * 1000)
            (path / "where.txt").write_text(str(path))
        op.report_completed(0.5)
"""


def test_trial_is_sandboxed_and_its_shared_fs_checkpoint_downloads(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    host_path = cluster.scratch  # the admin's second shared_fs
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = {
        "name": "sandbox",
        "entrypoint": f"python3 train.py {cluster.data_dir} {cluster.data_dir / 'join-token'}",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0,
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(host_path)},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    exp_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "exp.yaml"), str(context),
                                    "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=300)

    trial = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"][0]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    seen = json.loads(next(ln for ln in logs.splitlines() if "SEEN " in ln).split("SEEN ", 1)[1])
    assert seen["uid"] != 0
    assert seen["cwd"] == "/run/determined/workdir" and seen["cluster_json"] is True
    assert seen["master_db"] is False and seen["join_token"] is False

    [ckpt] = [c for c in trial["checkpoints"] if c["state"] == "STATE_COMPLETED"]
    uuid = ckpt["uuid"]
    # written at the container path, stored in host_path
    assert (host_path / uuid / "where.txt").read_text().startswith("/determined_shared_fs/")
    assert (host_path / uuid / "weights.bin").read_bytes() == b"w" * 1000
    # published out of the task's staging directory, read-only, owned by nobody the task runs as
    weights = (host_path / uuid / "weights.bin").stat()
    assert weights.st_mode & 0o777 == 0o444 and weights.st_uid != seen["uid"]
    assert ckpt["digests"]["weights.bin"] == hashlib.sha256(b"w" * 1000).hexdigest()

    resp = requests.get(f"{cluster.url}/checkpoints/{uuid}", timeout=60,
                        headers={"Authorization": f"Bearer {login(cluster.url)}"})
    assert resp.status_code == 200, resp.text[:500]
    with tarfile.open(fileobj=io.BytesIO(resp.content), mode="r:gz") as tar:
        names = {m.name.lstrip("./") for m in tar.getmembers() if m.isfile()}
        weights = next(m for m in tar.getmembers() if m.name.endswith("weights.bin"))
        assert tar.extractfile(weights).read() == b"w" * 1000
    assert any(n.endswith("where.txt") for n in names)

    # the allocation has ended: its task directory goes from the agent's work dir
    work_dirs = list((cluster.data_dir / "agents").iterdir())
    assert work_dirs
    wait_for(lambda: not any((w / "tasks").exists() and any((w / "tasks").iterdir()) for w in work_dirs),
             30, "the task directory to be removed")
