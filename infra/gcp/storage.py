"""The checkpoint bucket: uniform bucket-level access (no object ACLs), public access prevention
enforced, versioned; encrypted at rest as every GCS bucket is. Its name adds a hash of the
project to the cluster id (bucket names are global)."""

from __future__ import annotations

import hashlib

import pulumi_gcp as gcp

from infra.gcp.context import GcpContext


def bucket_name(cluster_id: str, project: str) -> str:
    return f"{cluster_id}-ckpt-{hashlib.sha1(project.encode()).hexdigest()[:6]}"


def build_bucket(ctx: GcpContext) -> gcp.storage.Bucket:
    opts = ctx.opts
    name = bucket_name(opts.cluster_id, opts.project_id)
    return gcp.storage.Bucket(
        ctx.name("checkpoints"), name=name, location=opts.region.upper(), uniform_bucket_level_access=True,
        public_access_prevention="enforced", versioning=gcp.storage.BucketVersioningArgs(enabled=True),
        force_destroy=False, labels=ctx.labels("checkpoints"), opts=ctx.res())
