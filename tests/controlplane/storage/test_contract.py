"""The StorageManager contract, scenario by scenario, on shared_fs, S3 and GCS alike."""

from __future__ import annotations

import uuid

import pytest

from controlplane.storage import CheckpointNotFound
from tests.controlplane.storage.checkpoints import digests, tree, write_tree
from tests.controlplane.storage.conftest import PREFIX


def store(backend, ckpt_uuid: str | None = None) -> tuple[str, dict[str, bytes]]:
    ckpt_uuid = ckpt_uuid or str(uuid.uuid4())
    with backend.storage.store_path(ckpt_uuid) as path:
        files = write_tree(path)
    return ckpt_uuid, files


def test_round_trip_keeps_every_byte(backend, tmp_path):
    ckpt_uuid, files = store(backend)

    assert backend.stored(ckpt_uuid) == sorted(files)
    backend.storage.download(ckpt_uuid, tmp_path / "copy")
    assert tree(tmp_path / "copy") == digests(files)
    with backend.storage.restore_path(ckpt_uuid) as restored:
        assert tree(restored) == digests(files)


def test_resources_are_sizes_as_stored(backend):
    ckpt_uuid, files = store(backend)
    assert backend.storage.resources(ckpt_uuid) == {rel: len(data) for rel, data in files.items()}


def test_cloud_objects_live_at_prefix_uuid_relpath(cloud):
    ckpt_uuid, files = store(cloud)
    assert cloud.storage.where(ckpt_uuid).endswith(f"/{PREFIX}/{ckpt_uuid}/")
    assert cloud.stored(ckpt_uuid) == sorted(files)


def test_upload_dir_stores_a_finished_directory(backend, tmp_path):
    files = write_tree(tmp_path / "src")
    backend.storage.upload_dir(tmp_path / "src", "ckpt-1")
    assert backend.storage.resources("ckpt-1") == {rel: len(data) for rel, data in files.items()}
    assert tree(tmp_path / "src") == digests(files)  # the source is left as it was


def test_delete_is_idempotent(backend):
    ckpt_uuid, _ = store(backend)
    backend.storage.delete(ckpt_uuid)
    backend.storage.delete(ckpt_uuid)
    backend.storage.delete(str(uuid.uuid4()))  # never stored
    assert backend.stored(ckpt_uuid) == []
    assert ckpt_uuid not in backend.storage.list_checkpoints()


def test_download_of_a_deleted_checkpoint_says_so(backend, tmp_path):
    ckpt_uuid, _ = store(backend)
    backend.storage.delete(ckpt_uuid)

    with pytest.raises(CheckpointNotFound, match=rf"checkpoint {ckpt_uuid} not found .*deleted"):
        backend.storage.download(ckpt_uuid, tmp_path / "copy")
    with pytest.raises(CheckpointNotFound):
        backend.storage.resources(ckpt_uuid)
    with pytest.raises(FileNotFoundError):  # what directory-storage callers already catch
        with backend.storage.restore_path(ckpt_uuid):
            pass


def test_an_exception_while_writing_stores_nothing(backend):
    ckpt_uuid = str(uuid.uuid4())
    with pytest.raises(RuntimeError, match="training crashed"):
        with backend.storage.store_path(ckpt_uuid) as path:
            write_tree(path)
            raise RuntimeError("training crashed")
    assert backend.stored(ckpt_uuid) == []
    assert backend.storage.list_checkpoints() == []


def test_list_checkpoints_names_the_stored_ones(backend):
    first, _ = store(backend)
    second, _ = store(backend)
    backend.storage.delete(first)
    assert backend.storage.list_checkpoints() == [second]


def test_a_uuid_is_one_path_component(backend):
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="not a checkpoint uuid"):
            backend.storage.delete(bad)


def test_delete_files_removes_only_those(backend):
    ckpt_uuid, files = store(backend)
    doomed = sorted(files)[:2]
    backend.storage.delete_files(ckpt_uuid, [*doomed, "never-there.bin"])
    backend.storage.delete_files(ckpt_uuid, doomed)  # again: nothing left to do
    assert backend.storage.resources(ckpt_uuid) == {rel: len(data) for rel, data in files.items()
                                                    if rel not in doomed}
    backend.storage.delete_files(ckpt_uuid, ["../outside", "/etc/passwd"])  # never outside the checkpoint
    assert backend.stored(ckpt_uuid) == sorted(set(files) - set(doomed))


def test_download_files_copies_only_those(backend, tmp_path):
    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "a.bin").write_bytes(b"a" * 100)
    (src / "model" / "a.bin.bak").write_bytes(b"b")
    (src / "log.txt").write_text("log")
    backend.storage.upload_dir(src, "ckpt-2")
    backend.storage.download_files("ckpt-2", ["model/a.bin"], tmp_path / "one")
    assert tree(tmp_path / "one") == {"model/a.bin": tree(src)["model/a.bin"]}
    for missing in ("model/a", "nope.txt", "../src/log.txt"):
        with pytest.raises(CheckpointNotFound):
            backend.storage.download_files("ckpt-2", [missing], tmp_path / "none")
