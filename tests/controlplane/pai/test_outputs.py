"""Where an OpenPAI job's outputs are kept (PAI_DEFAULT_FS_URI), and the tar stream between a task's
agent and the master: regular files only, never a symlink's target, bounded, refused when malformed."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from controlplane.pai import outputs as out
from controlplane.storage import from_config


@pytest.mark.parametrize(("base", "uri"), [
    ({"type": "shared_fs", "host_path": "/mnt/ckpt"}, "file:///mnt/ckpt/pai-outputs/J"),
    ({"type": "shared_fs", "host_path": "/mnt/ckpt", "storage_path": "team/a"}, "file:///mnt/ckpt/team/a/pai-outputs/J"),
    ({"type": "directory", "container_path": "/data"}, "file:///data/pai-outputs/J"),
    ({"type": "s3", "bucket": "b", "prefix": "runs/"}, "s3://b/runs/pai-outputs/J"),
    ({"type": "s3", "bucket": "b"}, "s3://b/pai-outputs/J"),
    ({"type": "gcs", "bucket": "g", "prefix": "p"}, "gs://g/p/pai-outputs/J"),
])
def test_the_default_fs_uri_names_where_the_jobs_outputs_are_kept(base, uri, tmp_path):
    assert out.location_uri(base, "J") == uri
    cfg = out.storage_config(base, "J", 2)
    assert base != cfg and {k: v for k, v in cfg.items() if k not in ("storage_path", "prefix", "container_path")} \
        == {k: v for k, v in base.items() if k not in ("storage_path", "prefix", "container_path")}
    if base["type"] == "s3":
        assert from_config(cfg, tmp_path).where("worker-0") == f"{uri}/2/worker-0/"  # type: ignore[attr-defined]


def test_a_shared_fs_tasks_outputs_land_under_the_uri(tmp_path):
    base = {"type": "shared_fs", "host_path": str(tmp_path / "ckpt")}
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    from_config(out.storage_config(base, "J", 1), tmp_path).upload_dir(tmp_path / "src", "worker-0")
    uri = out.location_uri(base, "J")
    assert (Path(uri.removeprefix("file://")) / "1" / "worker-0" / "a.txt").read_text() == "a"


def test_task_names():
    assert out.parse_task_name("worker-0") == ("worker", 0) and out.parse_task_name("ps_server-12") == ("ps_server", 12)
    for bad in ("worker", "worker-", "-1", "a-b-1", "worker-x", "worker-1234567"):
        assert out.parse_task_name(bad) is None, bad
    assert out.task_name("worker", 3) == "worker-3"


def round_trip(src: Path, dst: Path) -> list[out.KeptFile]:
    dst.mkdir()
    return out.read_tar(io.BytesIO(b"".join(out.tar_chunks(src, out.scan(src)))), dst)


def test_only_regular_files_travel_and_no_symlink_is_followed(tmp_path):
    src = tmp_path / "output"
    (src / "model" / "layers").mkdir(parents=True)
    (src / "model" / "layers" / "0.bin").write_bytes(os.urandom(1025))
    (src / "log.txt").write_text("epoch 1\n")
    (src / "empty").write_bytes(b"")
    secret = tmp_path / "secret"
    secret.write_text("the agent's")
    (src / "leak").symlink_to(secret)  # a file outside
    (src / "dirlink").symlink_to(tmp_path)  # a directory outside
    os.mkfifo(src / "fifo")  # would block a reader
    found = out.scan(src)
    assert [rel for rel, _ in found.files] == ["empty", "log.txt", "model/layers/0.bin"]
    assert found.left_out == {"symlinks (never followed)": 2, "devices, sockets or FIFOs": 1}
    assert found.left_out_words() == "1 devices, sockets or FIFOs, 2 symlinks (never followed)"
    kept = round_trip(src, tmp_path / "dst")
    assert [(k.path, k.size) for k in kept] == [("empty", 0), ("log.txt", 8), ("model/layers/0.bin", 1025)]
    assert (tmp_path / "dst" / "model" / "layers" / "0.bin").read_bytes() == (src / "model/layers/0.bin").read_bytes()
    assert not (tmp_path / "dst" / "leak").exists()


def test_the_root_itself_must_not_be_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "output").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        out.scan(tmp_path / "output")


def test_the_caps_leave_files_out_and_say_so(tmp_path):
    src = tmp_path / "output"
    src.mkdir()
    for i in range(5):
        (src / f"f{i}").write_bytes(b"x" * 100)
    found = out.scan(src, max_files=3)
    assert len(found.files) == 3 and found.left_out == {"files over the cap of 3 files": 2}
    found = out.scan(src, max_bytes=250)
    assert [rel for rel, _ in found.files] == ["f0", "f1"] and found.left_out_bytes == 300
    assert found.left_out == {"files over the cap of 250 B": 3}


def test_a_file_that_grows_after_the_scan_is_sent_as_scanned(tmp_path):
    src = tmp_path / "output"
    src.mkdir()
    (src / "grows").write_bytes(b"a" * 10)
    found = out.scan(src)
    (src / "grows").write_bytes(b"b" * 5000)
    (tmp_path / "dst").mkdir()
    kept = out.read_tar(io.BytesIO(b"".join(out.tar_chunks(src, found))), tmp_path / "dst")
    assert [(k.path, k.size) for k in kept] == [("grows", 10)]


def tar_with(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    buf.seek(0)
    return buf


def reg(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


@pytest.mark.parametrize(("members", "why"), [
    ([reg("../escape")], "must not have an empty, '.' or '..' part"),
    ([reg("/etc/passwd")], "must be a relative path"),
    ([reg("a//b")], "must not have an empty"),
    ([reg("x" * 2000)], "must have 1 to 1024 characters"),
    ([reg("a"), reg("a")], "given twice"),
    ([reg("a"), reg("a/b")], "under a file of that name"),
    ([reg("a/b"), reg("a")], "given twice, or a directory of that name exists"),
])
def test_the_master_refuses_a_stream_the_agent_could_not_have_sent(members, why, tmp_path):
    with pytest.raises(out.OutputsRefused, match=why):
        out.read_tar(tar_with(*members), tmp_path)
    assert not (tmp_path.parent / "escape").exists()


def test_links_devices_and_too_much_are_refused(tmp_path):
    link = tarfile.TarInfo("etc")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    with pytest.raises(out.OutputsRefused, match="only regular files"):
        out.read_tar(tar_with((link, b"")), tmp_path)
    hard = tarfile.TarInfo("h")
    hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/shadow"
    with pytest.raises(out.OutputsRefused, match="only regular files"):
        out.read_tar(tar_with((hard, b"")), tmp_path)
    (tmp_path / "n").mkdir()
    (tmp_path / "m").mkdir()
    with pytest.raises(out.OutputsRefused, match="more than 2 files"):
        out.read_tar(tar_with(reg("a"), reg("b"), reg("c")), tmp_path / "n", max_files=2)
    with pytest.raises(out.OutputsRefused, match="more than 5 bytes"):
        out.read_tar(tar_with(reg("big", b"123456")), tmp_path / "m", max_bytes=5)
    with pytest.raises(out.OutputsRefused, match="not a tar stream"):
        out.read_tar(io.BytesIO(b"garbage" * 200), tmp_path)
