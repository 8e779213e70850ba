"""Checkpoints on S3 (moto server) and GCS (gcp-storage-emulator), end to end on a local cluster:
the spirals trial writes its checkpoints to the bucket, is killed mid-run, resumes from the stored
checkpoint and completes; GC leaves exactly what the save_* policy keeps plus the registered model
version, in the bucket and in the database; `det checkpoint download` (direct and through the
master) returns the bucket's bytes; what must not be deleted is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
import yaml

from tests.e2e.conftest import EXAMPLE, kill_if_alive, processes_mentioning
from tests.support.cluster import login, wait_for
from tests.support.storage_servers import gcs_bucket, gcs_emulator, moto_s3, s3_bucket  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.e2e,
    # PostgreSQL: checkpoints in cloud storage that outlive a killed trial, as a production cluster keeps them.
    pytest.mark.one_database("postgres"),
    # Its own waits (two checkpoints, then the whole trial) add up to more than the suite's default
    # 300 s on a loaded machine with the GCS emulator; the test bounds itself with those waits.
    pytest.mark.timeout(900),
]

PREFIX = "e2e/ckpts"
BATCHES = 800  # a checkpoint every 100 batches


def bucket_uuids(bucket) -> set[str]:
    return {k[len(PREFIX) + 1:].split("/", 1)[0] for k in bucket.keys(PREFIX + "/")}


def bucket_files(bucket, uuid: str) -> dict[str, bytes]:
    """A checkpoint's objects read with the plain client, not through our storage code."""
    prefix = f"{PREFIX}/{uuid}/"
    client = bucket.client()
    out = {}
    for key in bucket.keys(prefix):
        if hasattr(client, "get_object"):
            out[key[len(prefix):]] = client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
        else:
            out[key[len(prefix):]] = client.bucket(bucket.name).blob(key).download_as_bytes()
    return out


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_cloud_checkpoints_survive_a_kill_then_gc_keeps_the_policy_and_downloads_match(
        kind, request, local_cluster, tmp_path):
    bucket = request.getfixturevalue(f"{kind}_bucket")  # gcs: STORAGE_EMULATOR_HOST reaches the cluster
    cluster = local_cluster(agents=1, slots=1, storage_choices=[{"name": "bucket", **bucket.config}])
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": BATCHES}
    config["checkpoint_storage"] = {**bucket.config, "prefix": PREFIX, "save_experiment_best": 0,
                                    "save_trial_best": 1, "save_trial_latest": 1}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    exp_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "exp.yaml"), str(EXAMPLE),
                                    "--json").stdout)["id"]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    def trial_with_checkpoint(min_steps: int):
        def check():
            trials = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
            if not trials or not trials[0].get("latestCheckpointUuid"):
                return None
            c = s.get(f"{cluster.url}/api/v1/checkpoints/{trials[0]['latestCheckpointUuid']}").json()["checkpoint"]
            return trials[0] if c["metadata"]["steps_completed"] >= min_steps else None
        return check

    trial = wait_for(trial_with_checkpoint(100), 240, "the first checkpoint in the bucket")
    first = trial["latestCheckpointUuid"]
    assert first in bucket_uuids(bucket)  # reported only once its files are in storage
    cluster.det("model", "create", f"spirals-{kind}")
    cluster.det("model", "register-version", f"spirals-{kind}", first)

    wait_for(trial_with_checkpoint(300), 240, "a later checkpoint")
    trainers = [p for p in processes_mentioning(str(cluster.data_dir))
                if b"train.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert trainers
    for pid in trainers:  # the trial dies mid-run (killing its launcher shell can take the rest with it)
        kill_if_alive(pid)

    cluster.det("experiment", "wait", str(exp_id), timeout=600)
    trial = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
    assert trial["state"] == "STATE_COMPLETED" and trial["restarts"] == 1, trial
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert "resumed from checkpoint" in logs, logs[-2000:]

    # GC at the experiment's end: the latest, the best by validation_loss, and the registered one.
    def settled():
        # GC is done when nothing is left in between: a checkpoint the killed run only announced
        # (STATE_ACTIVE) is GC's to remove too, as is one marked for deletion.
        listed = json.loads(cluster.det("experiment", "list-checkpoints", str(exp_id), "--json").stdout)
        states = {c["state"] for c in listed}
        return listed if states <= {"STATE_COMPLETED", "STATE_DELETED"} and "STATE_DELETED" in states else None

    listed = wait_for(settled, 300, "checkpoint GC to finish")
    steps = {c["uuid"]: c["metadata"]["steps_completed"] for c in listed}
    loss = {c["uuid"]: c["training"]["validationMetrics"]["avgMetrics"]["validation_loss"] for c in listed}
    # The killed run may have announced a checkpoint it never completed (GC deletes it); the resumed
    # run redoes that step with the same loss, so on a tie the completed one is the one ranked.
    done = {c["uuid"] for c in listed if c["state"] == "STATE_COMPLETED"}
    latest = max(steps, key=lambda u: (steps[u], u in done))
    best = min(loss, key=lambda u: (loss[u], u not in done))
    assert first not in (latest, best), "the registered checkpoint must be one the policy would delete"
    kept = {latest, best, first}
    assert {c["uuid"] for c in listed if c["state"] == "STATE_COMPLETED"} == kept, [
        (c["uuid"], c["state"], steps[c["uuid"]], loss[c["uuid"]]) for c in listed]
    assert {c["state"] for c in listed if c["uuid"] not in kept} == {"STATE_DELETED"}
    assert bucket_uuids(bucket) == kept  # no files without a row, no row without its files
    assert len(listed) >= 6

    for mode in ("auto", "master"):
        out = tmp_path / f"download-{mode}"
        done = cluster.det("checkpoint", "download", best, "-o", str(out), "--mode", mode)
        assert "Downloaded checkpoint" in done.stdout
        assert local_files(out) == bucket_files(bucket, best) and "state.pt" in local_files(out)

    described = json.loads(cluster.det("checkpoint", "describe", latest, "--json").stdout)
    assert described["state"] == "STATE_COMPLETED"
    refused = cluster.det("checkpoint", "rm", first, check=False)
    assert refused.returncode != 0 and "model registry" in refused.stderr
    deleted = sorted(set(steps) - kept)[0]
    gone = cluster.det("checkpoint", "download", deleted, "-o", str(tmp_path / "gone"), check=False)
    assert gone.returncode != 0 and "deleted" in gone.stderr
    cluster.det("checkpoint", "rm", latest)
    assert bucket_uuids(bucket) == kept - {latest}  # (the latest may also be the best)


def test_an_admin_added_storage_choice_checkpoints_downloads_and_warm_starts(local_cluster, tmp_path):
    """The cluster's master.yaml offers a second shared_fs (``scratch``, every test cluster's); an
    experiment picks it by name with a sub-path of its own: its trial's checkpoints land there (not in
    the default), read-only, `det checkpoint download` returns them, and a warm start from one runs."""
    cluster = local_cluster(agents=1, slots=1)
    storage = {"name": "scratch", "storage_path": "e2e/runs"}
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["checkpoint_storage"] = storage
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    exp_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "exp.yaml"), str(EXAMPLE),
                                    "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=300)
    described = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)
    assert described["experiment"]["state"] == "STATE_COMPLETED"
    stored = described["experiment"]["config"]["checkpoint_storage"]
    assert (stored["host_path"], stored["storage_path"]) == (str(cluster.scratch), "e2e/runs")
    listed = json.loads(cluster.det("experiment", "list-checkpoints", str(exp_id), "--json").stdout)
    latest = max((c for c in listed if c["state"] == "STATE_COMPLETED"), key=lambda c: c["metadata"]["steps_completed"])
    uuid = latest["uuid"]
    published = cluster.scratch / "e2e" / "runs" / uuid
    assert (published / "state.pt").is_file() and not (published.stat().st_mode & 0o222)  # read-only
    assert not (cluster.data_dir / "checkpoints" / uuid).exists()
    for mode in ("auto", "master"):
        out = tmp_path / f"download-{mode}"
        assert "Downloaded checkpoint" in cluster.det("checkpoint", "download", uuid, "-o", str(out),
                                                      "--mode", mode).stdout
        assert local_files(out) == local_files(published)

    warm = {**config, "name": "warm", "searcher": {**config["searcher"], "source_checkpoint_uuid": uuid,
                                                   "max_length": {"batches": latest["metadata"]["steps_completed"]
                                                                  + 100}}}
    (tmp_path / "warm.yaml").write_text(yaml.safe_dump(warm))
    warm_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "warm.yaml"), str(EXAMPLE),
                                     "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(warm_id), timeout=300)
    trial = json.loads(cluster.det("experiment", "describe", str(warm_id), "--json").stdout)["trials"][0]
    assert trial["state"] == "STATE_COMPLETED" and trial["warmStartCheckpointUuid"] == uuid, trial
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert f"resumed from checkpoint {uuid}" in logs, logs[-2000:]
