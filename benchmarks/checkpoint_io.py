"""Checkpoint upload/download throughput: our stores vs. the plain cloud clients, same run.

A checkpoint of a few large and many small files (default 1 GiB: 3 large files plus 1,000 ×
100 KiB) is generated in a temp dir, then moved to and from moto S3 and the GCS emulator (both
started here, on loopback, as child processes so their memory is not counted as ours):

- ours:  ``S3Storage`` / ``GCSStorage`` ``upload_dir`` and ``download`` (default TransferSettings);
- plain: one file after another with the SDK's own transfer: boto3 ``upload_file``/``download_file``
  (default TransferConfig: 8 MiB multipart, 10 threads per file), google-cloud-storage
  ``blob.upload_from_filename``/``download_to_filename``.

Each transfer runs in a fresh child process; its peak RSS is that process's ru_maxrss (imports
included, the same for both clients: ``rss_after_imports_mib``). Servers are emptied before each client's round: the GCS
emulator rewrites all its metadata on every write, so whoever went second would pay for the
other's objects. ``--repeat N`` keeps the best of N rounds, alternating which client goes first.
The last line holds the figures as key=value.

    .venv/bin/python benchmarks/checkpoint_io.py [--size-mib 1024] [--backends s3,gcs]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from controlplane.storage import GCSStorage, S3Storage, TransferSettings
from controlplane.storage.base import directory_resources, local_files
from tests.support.storage_servers import S3_KEYS, gcs_emulator_process, moto_s3_process, unique_bucket

MiB = 1024 * 1024
BLOCK = 8 * MiB


def make_checkpoint(root: Path, size_mib: int, large: int, small: int, small_kib: int) -> int:
    """Writes ``large`` equal files plus ``small`` files of ``small_kib`` KiB (scaled down with
    ``size_mib``), streaming random blocks; returns the total bytes."""
    small = max(10, small * size_mib // 1024)
    small_total = small * small_kib * 1024
    large_size = max(1, (size_mib * MiB - small_total) // large)
    for i in range(large):
        path = root / "model" / f"shard-{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            left = large_size
            while left:
                n = min(BLOCK, left)
                f.write(os.urandom(n))
                left -= n
    for i in range(small):
        path = root / "tensors" / f"group-{i % 10}" / f"t{i:05d}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(small_kib * 1024))
    return sum(directory_resources(root).values())


class Plain:
    """The SDK's own per-file transfer, one file after another."""

    def __init__(self, kind: str, bucket: str, endpoint: str) -> None:
        self.kind, self.bucket = kind, bucket
        if kind == "s3":
            import boto3
            from boto3.s3.transfer import TransferConfig

            session = boto3.session.Session(aws_access_key_id=S3_KEYS["access_key"],
                                            aws_secret_access_key=S3_KEYS["secret_key"])
            self.s3 = session.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            self.config = TransferConfig()
        else:
            from controlplane.storage.gcs import make_client

            self.gcs = make_client().bucket(bucket)

    def upload(self, src: Path, prefix: str) -> None:
        for rel, path in sorted(local_files(src).items()):
            if self.kind == "s3":
                self.s3.upload_file(str(path), self.bucket, prefix + rel, Config=self.config)
            else:
                self.gcs.blob(prefix + rel).upload_from_filename(str(path))

    def download(self, prefix: str, dst: Path) -> None:
        """Lists the checkpoint's objects, then fetches them: what any copy of a directory needs."""
        if self.kind == "s3":
            pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        else:
            keys = [b.name for b in self.gcs.list_blobs(prefix=prefix)]
        for key in keys:
            target = dst / key[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            if self.kind == "s3":
                self.s3.download_file(self.bucket, key, str(target), Config=self.config)
            else:
                self.gcs.blob(key).download_to_filename(str(target))


def settings() -> TransferSettings:
    """The defaults, unless BENCH_WORKERS / BENCH_PART_MIB / BENCH_GCS_CHUNK_MIB override them (tuning)."""
    default = TransferSettings()
    part = int(os.environ.get("BENCH_PART_MIB", 0)) * MiB or default.part_size
    return TransferSettings(max_workers=int(os.environ.get("BENCH_WORKERS", 0)) or default.max_workers,
                            part_size=part, multipart_threshold=max(part, default.multipart_threshold),
                            gcs_chunk_size=(int(os.environ.get("BENCH_GCS_CHUNK_MIB", 0)) * MiB
                                            or default.gcs_chunk_size))


def store(kind: str, bucket: str, endpoint: str) -> S3Storage | GCSStorage:
    if kind == "s3":
        return S3Storage(bucket, "bench", endpoint_url=endpoint, **S3_KEYS, transfer=settings())
    return GCSStorage(bucket, "bench", transfer=settings())


def phase(kind: str, client: str, direction: str, endpoint: str, bucket: str, src: Path, dst: Path) -> None:
    """One transfer in this (child) process; prints {"seconds", "peak_rss_mib", "base_rss_mib"} as JSON."""
    if kind == "gcs":
        os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    storage = store(kind, bucket, endpoint)
    ckpt = "ckpt-1"
    prefix = storage.where(ckpt).split(f"{bucket}/", 1)[1]
    if client == "plain":
        plain = Plain(kind, bucket, endpoint)
        run = (lambda: plain.upload(src, prefix)) if direction == "up" else (lambda: plain.download(prefix, dst))
    else:
        storage.client  # noqa: B018 -- built (and the SDK imported) before timing, as the plain client is
        run = (lambda: storage.upload_dir(src, ckpt)) if direction == "up" else (lambda: storage.download(ckpt, dst))
    rss = re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text())
    assert rss is not None  # Linux always reports it
    base = int(rss.group(1)) / 1024
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak, "base_rss_mib": base}))


def run_phase(kind: str, client: str, direction: str, endpoint: str, bucket: str, src: Path,
              dst: Path) -> dict[str, float]:
    """A fresh process per phase, so each peak RSS is that transfer's alone."""
    cmd = [sys.executable, __file__, "--phase", kind, client, direction, endpoint, bucket, str(src), str(dst)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} {client} {direction} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def reset(kind: str, endpoint: str, bucket: str) -> None:
    """An empty server: the emulator rewrites all its metadata on every write, so a client that
    ran after another would pay for the other's objects."""
    if kind == "s3":
        requests.post(f"{endpoint}/moto-api/reset", timeout=30).raise_for_status()
        store(kind, bucket, endpoint).client.create_bucket(Bucket=bucket)
    else:
        requests.get(f"{endpoint}/wipe", timeout=30).raise_for_status()
        os.environ["STORAGE_EMULATOR_HOST"] = endpoint
        store(kind, bucket, endpoint).client.create_bucket(bucket)


def same_files(a: Path, b: Path) -> bool:
    fa, fb = local_files(a), local_files(b)
    if fa.keys() != fb.keys():
        return False
    return all(fa[k].stat().st_size == fb[k].stat().st_size and _same_bytes(fa[k], fb[k]) for k in fa)


def _same_bytes(a: Path, b: Path) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(BLOCK), fb.read(BLOCK)
            if x != y:
                return False
            if not x:
                return True


def bench(kind: str, endpoint: str, src: Path, total: int, work: Path, repeat: int) -> dict[str, float]:
    """Best of ``repeat`` rounds (other work on the machine only ever slows a round down)."""
    bucket = unique_bucket("bench")
    out: dict[str, float] = {}
    for round_ in range(repeat):
        for client in (("plain", "ours") if round_ % 2 == 0 else ("ours", "plain")):
            reset(kind, endpoint, bucket)
            dst = work / f"{client}-copy"
            for direction in ("up", "down"):
                r = run_phase(kind, client, direction, endpoint, bucket, src, dst)
                key = f"{client}_{direction}"
                out[key] = max(out.get(key, 0.0), total / r["seconds"] / 1e6)
                out[f"{key}_rss"] = max(out.get(f"{key}_rss", 0.0), r["peak_rss_mib"])
                out["base_rss"] = max(out.get("base_rss", 0.0), r["base_rss_mib"])
            if not same_files(src, dst):
                raise SystemExit(f"{kind}: the {client} client's download differs from the source")
            shutil.rmtree(dst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="checkpoint size (default 1024)")
    parser.add_argument("--large-files", type=int, default=3)
    parser.add_argument("--small-files", type=int, default=1000, help="at 1 GiB; scaled with --size-mib")
    parser.add_argument("--small-kib", type=int, default=100)
    parser.add_argument("--backends", default="s3,gcs")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per backend; the best is kept")
    parser.add_argument("--phase", nargs=7, help=argparse.SUPPRESS)  # internal: one transfer in a child
    args = parser.parse_args()
    if args.phase:
        kind, client, direction, endpoint, bucket, src, dst = args.phase
        phase(kind, client, direction, endpoint, bucket, Path(src), Path(dst))
        return
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        work = Path(tmp)
        src = work / "src"
        total = make_checkpoint(src, args.size_mib, args.large_files, args.small_files, args.small_kib)
        n = len(local_files(src))
        print(f"checkpoint: {total / MiB:.0f} MiB in {n} files; {os.cpu_count()} CPUs; ours = {settings()} "
              "(GCS against the emulator: at most 4 requests at a time)")
        results: dict[str, dict[str, float]] = {}
        for kind in kinds:
            server = moto_s3_process() if kind == "s3" else gcs_emulator_process()
            with server as endpoint:
                results[kind] = r = bench(kind, endpoint, src, total, work, args.repeat)
            print(f"{kind:4s} upload   ours {r['ours_up']:7.1f} MB/s  plain {r['plain_up']:7.1f} MB/s  "
                  f"ratio {r['ours_up'] / r['plain_up']:.2f}x   peak RSS ours {r['ours_up_rss']:.0f} MiB, "
                  f"plain {r['plain_up_rss']:.0f} MiB")
            print(f"{kind:4s} download ours {r['ours_down']:7.1f} MB/s  plain {r['plain_down']:7.1f} MB/s  "
                  f"ratio {r['ours_down'] / r['plain_down']:.2f}x   peak RSS ours {r['ours_down_rss']:.0f} MiB, "
                  f"plain {r['plain_down_rss']:.0f} MiB")
            sys.stdout.flush()

    figures = {}
    for kind, r in results.items():
        figures.update({f"{kind}_up_mbps": r["ours_up"], f"{kind}_down_mbps": r["ours_down"],
                        f"{kind}_up_ratio": r["ours_up"] / r["plain_up"],
                        f"{kind}_down_ratio": r["ours_down"] / r["plain_down"]})
    figures["peak_rss_mib"] = max(max(r["ours_up_rss"], r["ours_down_rss"]) for r in results.values())
    figures["plain_peak_rss_mib"] = max(max(r["plain_up_rss"], r["plain_down_rss"]) for r in results.values())
    figures["rss_after_imports_mib"] = max(r["base_rss"] for r in results.values())
    print(" ".join(f"{k}={v:.2f}" if "ratio" in k else f"{k}={v:.0f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
