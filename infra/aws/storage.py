"""The checkpoint bucket: encrypted at rest (SSE-KMS with the account's aws/s3 key and a bucket
key), every kind of public access blocked, ACLs off, TLS required, versioned so a mistaken delete
can be undone. Its name is generated from the cluster id (bucket names are global)."""

from __future__ import annotations

import json
from typing import Any

import pulumi_aws as aws

from infra.aws.context import AwsContext


def tls_only_policy(bucket_arn: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyPlainHttp", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}


def build_bucket(ctx: AwsContext) -> aws.s3.Bucket:
    # bucket_prefix: at most 37 characters; AWS appends a unique suffix.
    bucket = aws.s3.Bucket(ctx.name("checkpoints"), bucket_prefix=f"{ctx.opts.cluster_id[:30]}-ckpt-",
                           force_destroy=False, tags=ctx.tags(name="checkpoints"), opts=ctx.res())
    block = aws.s3.BucketPublicAccessBlock(
        ctx.name("checkpoints"), bucket=bucket.id, block_public_acls=True, block_public_policy=True,
        ignore_public_acls=True, restrict_public_buckets=True, opts=ctx.res())
    aws.s3.BucketOwnershipControls(
        ctx.name("checkpoints"), bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=ctx.res())
    aws.s3.BucketServerSideEncryptionConfiguration(
        ctx.name("checkpoints"), bucket=bucket.id,
        rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
            apply_server_side_encryption_by_default=aws.s3.
            BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(sse_algorithm="aws:kms"),
            bucket_key_enabled=True)],
        opts=ctx.res())
    aws.s3.BucketVersioning(
        ctx.name("checkpoints"), bucket=bucket.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"), opts=ctx.res())
    # After the public access block: a policy put before it could be judged public.
    aws.s3.BucketPolicy(ctx.name("checkpoints"), bucket=bucket.id,
                        policy=bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn))),
                        opts=ctx.res(depends_on=[block]))
    return bucket
