"""A reported shared_fs checkpoint leaves its task's staging directory, becomes read-only and carries a
sha256 per file; a file changed after the report is refused by the download, naming it."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import uuid
from pathlib import Path

from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_checkpoint_gc import until
from tests.controlplane.master.test_trial_lifecycle import task_headers


async def _running(api, agent=None):
    agent = agent or FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "max_restarts": 0,
                                  "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    start = await agent.next_message()
    await agent.start(start)
    host = Path(start.trial_info["config"]["checkpoint_storage"]["host_path"])
    return start, host


async def _report(api, start, ckpt: str):
    return await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "allocationId": start.allocation_id, "taskId": start.task_id, "state": "STATE_COMPLETED",
        "resources": {"state.pt": "15", "sub/more.bin": "4"}, "metadata": {"steps_completed": 1}})


def _stage(host: Path, alloc: str, ckpt: str) -> Path:
    staged = host / ".staging" / alloc / ckpt
    (staged / "sub").mkdir(parents=True)
    (staged / "state.pt").write_bytes(b"trained weights")
    (staged / "sub" / "more.bin").write_bytes(b"more")
    if os.geteuid() == 0:  # as the task's uid wrote it
        for p in (staged, staged / "sub", staged / "state.pt", staged / "sub" / "more.bin"):
            os.chown(p, 65534, 65534)
    return staged


async def test_a_reported_checkpoint_is_published_read_only_with_a_digest_per_file(api):
    start, host = await _running(api)
    ckpt = str(uuid.uuid4())
    staged = _stage(host, start.allocation_id, ckpt)
    r = await _report(api, start, ckpt)
    assert r.status_code == 200, r.text

    final = host / ckpt
    assert not staged.exists() and (final / "state.pt").read_bytes() == b"trained weights"
    for path in (final, final / "sub"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o555
    for path in (final / "state.pt", final / "sub" / "more.bin"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o444
        if os.geteuid() == 0:
            assert path.stat().st_uid == 0  # the task's uid owns nothing in it
    answer = (await api.get(f"/api/v1/checkpoints/{ckpt}")).json()["checkpoint"]
    assert answer["digests"] == {"state.pt": hashlib.sha256(b"trained weights").hexdigest(),
                                 "sub/more.bin": hashlib.sha256(b"more").hexdigest()}
    r = await api.get(f"/checkpoints/{ckpt}")
    assert r.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        assert tar.extractfile("./state.pt").read() == b"trained weights"  # type: ignore[union-attr]


async def test_a_changed_or_added_file_is_refused_by_the_download_naming_it(api):
    start, host = await _running(api)
    ckpt = str(uuid.uuid4())
    _stage(host, start.allocation_id, ckpt)
    assert (await _report(api, start, ckpt)).status_code == 200
    final = host / ckpt
    os.chmod(final / "state.pt", 0o644)
    (final / "state.pt").write_bytes(b"planted pickle!")  # same size, other bytes
    r = await api.get(f"/checkpoints/{ckpt}")
    assert r.status_code == 409 and "'state.pt'" in r.json()["message"] and "changed" in r.json()["message"]

    (final / "state.pt").write_bytes(b"trained weights")
    os.chmod(final / "sub", 0o755)
    (final / "sub" / "evil.pkl").write_bytes(b"x")
    r = await api.get(f"/checkpoints/{ckpt}")
    assert r.status_code == 409 and "'sub/evil.pkl'" in r.json()["message"]
    (final / "sub" / "evil.pkl").unlink()
    assert (await api.get(f"/checkpoints/{ckpt}")).status_code == 200


async def test_a_checkpoint_holding_a_symbolic_link_is_refused_naming_it(api):
    """A link would make the master read its own files (its database) when the checkpoint is downloaded."""
    start, host = await _running(api)
    ckpt = str(uuid.uuid4())
    staged = _stage(host, start.allocation_id, ckpt)
    (staged / "db").symlink_to(api.rt.settings.data_dir / "master.db")
    r = await _report(api, start, ckpt)
    assert r.status_code == 400 and "'db'" in r.json()["message"], r.text
    answer = (await api.get(f"/api/v1/checkpoints/{ckpt}"))
    assert answer.status_code == 404  # never recorded as a checkpoint


async def test_what_an_ended_experiments_tasks_left_in_staging_is_removed(api):
    """A checkpoint written but never reported (the trial died first) leaves the staging directory
    with the rest of what the experiment's tasks left there once the experiment has ended."""
    agent = FakeAgent(api.rt, slots=1)
    start, host = await _running(api, agent)
    ckpt = str(uuid.uuid4())
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "allocationId": start.allocation_id, "state": "STATE_ACTIVE",
        "metadata": {"steps_completed": 1}})
    assert r.status_code == 200, r.text
    staged = _stage(host, start.allocation_id, ckpt)
    await agent.exit(start.allocation_id, 1)

    async def gone() -> bool:
        return not staged.parent.exists()

    await until(gone, "the allocation's staging directory to be removed")
    assert (host / ".staging").is_dir()  # other allocations' stay


async def test_a_report_whose_transaction_fails_leaves_the_checkpoint_staged_for_its_retry(api, monkeypatch):
    """The files were moved before the report's transaction; when it fails they go back, so the retry
    (the core API retries a 503) publishes them, and nothing is left in storage without a row."""
    from controlplane.master.errors import ApiError
    from controlplane.master.services import checkpoints

    class Unavailable(ApiError):
        status = 503

    start, host = await _running(api)
    ckpt = str(uuid.uuid4())
    staged = _stage(host, start.allocation_id, ckpt)
    real = checkpoints._store_report

    async def outage(*args, **kwargs):
        raise Unavailable("database unavailable: connection refused")

    monkeypatch.setattr(checkpoints, "_store_report", outage)
    assert (await _report(api, start, ckpt)).status_code == 503
    assert staged.is_dir() and not (host / ckpt).exists()
    monkeypatch.setattr(checkpoints, "_store_report", real)
    assert (await _report(api, start, ckpt)).status_code == 200
    assert not staged.exists() and (host / ckpt / "state.pt").read_bytes() == b"trained weights"
