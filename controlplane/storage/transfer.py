"""How cloud stores move bytes: concurrency, part sizes, retries. One frozen value per store."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class TransferSettings:
    """Tuning shared by the S3 and GCS stores; the defaults suit multi-GiB checkpoints.

    Memory in flight is bounded by the part/chunk sizes times the concurrency, whatever the
    file sizes: large files are streamed in parts, never read whole.
    """

    max_workers: int = 8
    """Concurrent requests for one checkpoint, over all its files and parts together."""
    multipart_threshold: int = 16 * MiB
    """S3: files at least this big go as parallel multipart uploads and ranged parallel GETs.
    (GCS switches to resumable uploads above 8 MiB, the client library's own cut-over.)"""
    part_size: int = 16 * MiB
    """S3 part size (s3transfer holds up to 10 parts per upload in memory)."""
    gcs_chunk_size: int = 32 * MiB
    """GCS resumable chunk size, rounded up to a multiple of 256 KiB: one request per chunk, so
    bigger chunks mean fewer round trips (the client library's own default is 100 MiB)."""
    attempts: int = 5
    """S3: tries per request (botocore's standard retry mode) before an error is final."""
    retry_deadline_s: float = 60.0
    """GCS: how long one request is retried (google-api-core Retry timeout)."""
    cleanup_deadline_s: float = 30.0
    """After a failed upload, how long to keep trying to remove what was written."""
