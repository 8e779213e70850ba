"""Checkpoint storage: one small interface (``StorageManager``), backends for a shared file
system, S3 and GCS, one error taxonomy, and ``from_config`` for ``checkpoint_storage`` configs.

Importing this package is cheap: boto3 and google-cloud-storage load on first use.
"""

from controlplane.storage.base import StorageManager, directory_resources
from controlplane.storage.errors import (
                                         AccessDenied,
                                         BucketNotFound,
                                         CheckpointChanged,
                                         CheckpointNotFound,
                                         StorageError,
                                         StorageUnavailable,
)
from controlplane.storage.factory import from_config
from controlplane.storage.gcs import GCSStorage
from controlplane.storage.object_store import ObjectStore
from controlplane.storage.s3 import S3Storage
from controlplane.storage.shared_fs import LocalDirectoryStorage
from controlplane.storage.transfer import TransferSettings

__all__ = [
    "AccessDenied", "BucketNotFound", "CheckpointChanged", "CheckpointNotFound", "GCSStorage", "LocalDirectoryStorage",
    "ObjectStore",
    "S3Storage", "StorageError", "StorageManager", "StorageUnavailable", "TransferSettings", "directory_resources",
    "from_config",
]
