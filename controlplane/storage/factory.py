"""An experiment's ``checkpoint_storage`` config → a StorageManager.

Keys follow Determined: ``type: shared_fs|directory|s3|gcs``; s3 takes ``bucket, prefix,
endpoint_url, access_key, secret_key, temp_dir``; gcs takes ``bucket, prefix, temp_dir``. Every
type accepts and ignores ``save_experiment_best, save_trial_best, save_trial_latest`` (GC policy).
An unknown key on s3/gcs is an error, so a misspelt ``secret_key`` cannot silently fall back to
other credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controlplane.storage.base import StorageManager
from controlplane.storage.shared_fs import LocalDirectoryStorage
from controlplane.storage.transfer import TransferSettings

SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"  # Determined's default container_path
GC_KEYS = frozenset({"save_experiment_best", "save_trial_best", "save_trial_latest"})
_CLOUD_KEYS = {
    "s3": frozenset({"bucket", "prefix", "endpoint_url", "access_key", "secret_key", "temp_dir"}),
    "gcs": frozenset({"bucket", "prefix", "temp_dir"}),
}


def from_config(cfg: dict[str, Any] | str | Path | None, default_dir: Path, *,
                transfer: TransferSettings | None = None, in_container: bool = False) -> StorageManager:
    """The storage of an experiment's ``checkpoint_storage`` (a dict), or a plain directory
    (str/Path, as ``core.init(checkpoint_storage=...)`` accepts); None → ``default_dir``.
    ``transfer`` tunes the cloud stores. ``in_container``: the caller is a task whose sandbox
    mounts a ``shared_fs`` host_path at its container_path (default ``/determined_shared_fs``),
    so that is where it reads and writes; everyone else uses host_path. Raises ValueError for
    an invalid config."""
    if not cfg:
        return LocalDirectoryStorage(Path(default_dir))
    if isinstance(cfg, (str, Path)):
        return LocalDirectoryStorage(Path(cfg))
    kind = cfg.get("type")
    if kind == "shared_fs":
        if not cfg.get("host_path"):
            raise ValueError("checkpoint_storage: shared_fs needs host_path")
        base = Path(cfg.get("container_path") or SHARED_FS_CONTAINER_PATH) if in_container else Path(cfg["host_path"])
        return LocalDirectoryStorage(_inside(base, cfg.get("storage_path")))
    if kind == "directory":
        if not cfg.get("container_path"):
            raise ValueError("checkpoint_storage: directory needs container_path")
        return LocalDirectoryStorage(Path(cfg["container_path"]))
    if kind in _CLOUD_KEYS:
        opts = _cloud_options(kind, cfg)
        if kind == "s3":
            from controlplane.storage.s3 import S3Storage

            return S3Storage(transfer=transfer, **opts)
        from controlplane.storage.gcs import GCSStorage

        return GCSStorage(transfer=transfer, **opts)
    raise ValueError(f"checkpoint_storage.type {kind!r} is not supported (shared_fs, directory, s3, gcs)")


def _cloud_options(kind: str, cfg: dict[str, Any]) -> dict[str, Any]:
    allowed = _CLOUD_KEYS[kind]
    unknown = sorted(set(cfg) - allowed - GC_KEYS - {"type"})
    if unknown:
        raise ValueError(f"checkpoint_storage: {kind} does not take {', '.join(unknown)} "
                         f"(it takes {', '.join(sorted(allowed))})")
    if not cfg.get("bucket"):
        raise ValueError(f"checkpoint_storage: {kind} needs bucket")
    if bool(cfg.get("access_key")) != bool(cfg.get("secret_key")):
        raise ValueError("checkpoint_storage: s3 needs both access_key and secret_key, or neither "
                         "(then the AWS credential chain is used)")
    return {k: cfg[k] for k in allowed if cfg.get(k) is not None}


def _inside(base: Path, sub: str | None) -> Path:
    if not sub:
        return base
    path = (base / sub).resolve()
    if path != base.resolve() and base.resolve() not in path.parents:
        raise ValueError(f"checkpoint_storage.storage_path {sub!r} must be a directory inside host_path {base}")
    return path
