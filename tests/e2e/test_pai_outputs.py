"""The OpenPAI guide's distributed TensorFlow example (tests/controlplane/pai/guide_example.py) on a real
cluster, changed only where this machine must: the image (a task environment the agents offer), the
virtual cluster (this cluster's pool), GPU and CPU counts (two one-slot agents on a 2-core host), and a
stand-in ``code/tf_cnn_benchmarks.py`` that takes the same arguments. Its tasks run sandboxed (bwrap,
dropped to an unprivileged user); each worker writes its checkpoint files to ``--train_dir=$PAI_OUTPUT_DIR``
and exits 0, the parameter servers serve until the job is done. What the workers wrote is kept in the
cluster's checkpoint storage under the job and downloaded afterwards with ``det pai output``.

The command keeps its ``pip --quiet install scipy &&`` prefix: the task installs into its own
writable layer. Tests use no network, so ``scipy`` is a stand-in wheel in the uploaded code
(``code/wheels``) that ``PIP_NO_INDEX``/``PIP_FIND_LINKS`` in the job's ``jobEnvs`` point pip at."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.controlplane.pai.guide_example import example
from tests.support.deadline import bounded
from tests.support.tiny_wheel import wheel

pytestmark = pytest.mark.e2e  # SQLite (`det deploy local`'s own): the scenario exercises processes and storage

PIP_PREFIX = "pip --quiet install scipy && "
STAND_IN = r'''
import json, os, sys, time

import scipy

args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
me = f"{args['job_name']}-{args['task_index']}"
print(f"{me} scipy {scipy.VERSION}", flush=True)
print(f"{me} train_dir={args['train_dir']} work_dir={os.environ['PAI_WORK_DIR']} cwd={os.getcwd()}", flush=True)
print(f"{me} fs={os.environ['PAI_DEFAULT_FS_URI']}", flush=True)
if args["job_name"] == "ps":
    time.sleep(3600)  # a parameter server serves until the job is done
train = args["train_dir"]
with open(os.path.join(train, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "model.ckpt-100"\n')
os.makedirs(os.path.join(train, "eval"), exist_ok=True)
with open(os.path.join(train, "eval", "results.json"), "w") as f:
    json.dump({"task_index": int(args["task_index"]), "model": args["model"], "batch_size": int(args["batch_size"]),
               "worker_hosts": args["worker_hosts"]}, f)
os.symlink("/etc/hostname", os.path.join(train, "not-an-output"))
print(f"{me} wrote {sorted(os.listdir(train))}", flush=True)
'''


def the_guides_job() -> dict:
    job = example()
    job["image"] = "default"
    job["virtualCluster"] = "default"
    job["jobEnvs"] = {**job.get("jobEnvs", {}), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "code/wheels"}
    for role in job["taskRoles"]:
        assert role["command"].startswith(PIP_PREFIX)  # kept as the guide writes it
        role["cpuNumber"] = 1
        if role["name"] == "worker":
            role["gpuNumber"] = 1
    return job


def wait_final(cluster, name: str, timeout: float = 240) -> dict:
    deadline = time.time() + bounded(timeout)
    while True:
        detail = json.loads(cluster.det("pai", "describe", name, "--json").stdout)
        if detail["jobStatus"]["state"] in ("SUCCEEDED", "FAILED", "STOPPED") and all(
                t["taskState"] not in ("WAITING", "RUNNING")
                for role in detail["taskRoles"].values() for t in role["taskStatuses"]):
            return detail
        assert time.time() < deadline, f"job {name} did not end: {json.dumps(detail)[:3000]}"
        time.sleep(1)


def test_the_guides_tensorflow_example_writes_to_pai_output_dir_and_its_output_is_downloaded(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=1)
    job = the_guides_job()
    name = job["jobName"]
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "tf_cnn_benchmarks.py").write_text(STAND_IN)
    (tmp_path / "code" / "wheels").mkdir()
    file_name, data = wheel("scipy", "1.0")  # the stand-in the job's pip installs
    (tmp_path / "code" / "wheels" / file_name).write_bytes(data)
    (tmp_path / "job.json").write_text(json.dumps(job))
    submitted = cluster.det("pai", "submit", str(tmp_path / "job.json"))
    assert "outputDir: '$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/output' is a name only here" \
        in submitted.stderr
    detail = wait_final(cluster, name)
    logs = cluster.det("pai", "logs", name).stdout
    assert detail["jobStatus"]["state"] == "SUCCEEDED", logs[-5000:]
    assert "worker-0 scipy 1.0" in logs and "ps-0 scipy 1.0" in logs, logs[-5000:]  # `pip install` worked

    # the sandboxed task wrote into its own $PAI_OUTPUT_DIR; PAI_WORK_DIR is its cwd
    w0 = re.search(r"worker-0 train_dir=(\S+) work_dir=(\S+) cwd=(\S+)", logs)
    assert w0 is not None, logs[-5000:]
    assert w0.group(1) == "/run/determined/output" and w0.group(2) == w0.group(3) == "/run/determined/workdir"
    assert "worker-0 wrote ['checkpoint', 'eval', 'not-an-output']" in logs, logs[-5000:]
    fs_uri = re.search(r"worker-1 fs=(\S+)", logs).group(1)  # type: ignore[union-attr]
    assert fs_uri.startswith("file://") and "/pai-outputs/" in fs_uri
    # each task's log says what was kept (the symlink never is), before its exit
    assert re.search(r"\[worker-1\] det-agent \S+: kept 2 files \(\d+ B\) of \$PAI_OUTPUT_DIR at "
                     + re.escape(fs_uri) + r"/1/worker-1 \(det pai output " + name + r"\); left out: "
                     r"1 symlinks \(never followed\)", logs), logs[-5000:]

    listed = json.loads(cluster.det("pai", "output", name, "--json").stdout)
    assert [(f["task"], f["attempt"], f["path"]) for f in listed] == [
        ("worker-0", 1, "checkpoint"), ("worker-0", 1, "eval/results.json"),
        ("worker-1", 1, "checkpoint"), ("worker-1", 1, "eval/results.json")]
    out = cluster.det("pai", "output", name, "--to", str(tmp_path / "got")).stdout
    assert f"Downloaded 4 files of job {name} (attempt 1, 2 tasks) into {tmp_path / 'got'}" in out
    got = tmp_path / "got"
    assert sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file()) == [
        "worker-0/checkpoint", "worker-0/eval/results.json", "worker-1/checkpoint", "worker-1/eval/results.json"]
    results = json.loads((got / "worker-1" / "eval" / "results.json").read_text())
    assert results["task_index"] == 1 and results["model"] == "resnet20" and results["batch_size"] == 32
    assert results["worker_hosts"].count(":") == 2  # $PAI_TASK_ROLE_worker_HOST_LIST, expanded
    # kept in the cluster's storage (its data dir's shared_fs) under the job, where PAI_DEFAULT_FS_URI says
    kept = Path(fs_uri.removeprefix("file://")) / "1" / "worker-0" / "checkpoint"
    assert kept.read_text() == (got / "worker-0" / "checkpoint").read_text() \
        == 'model_checkpoint_path: "model.ckpt-100"\n'
