"""Checkpoint storage for the core API; the implementation lives in ``controlplane.storage``.

Kept so that ``from controlplane.core.storage import ...`` (and ``core.storage.from_config``)
keep working.
"""

from controlplane.storage import (
                                  AccessDenied,
                                  BucketNotFound,
                                  CheckpointNotFound,
                                  GCSStorage,
                                  LocalDirectoryStorage,
                                  S3Storage,
                                  StorageError,
                                  StorageManager,
                                  StorageUnavailable,
                                  TransferSettings,
                                  directory_resources,
                                  from_config,
)

__all__ = [
    "AccessDenied", "BucketNotFound", "CheckpointNotFound", "GCSStorage", "LocalDirectoryStorage", "S3Storage",
    "StorageError", "StorageManager", "StorageUnavailable", "TransferSettings", "directory_resources", "from_config",
]
