"""IAM roles and instance profiles, with policy documents written out as plain dicts (pure
functions, so tests read exactly what AWS will get).

The master may launch instances only into this deployment's subnets, security group and image,
and only tagged with the deployment; it may stop/terminate only instances carrying that tag, pass
only the agent role, and use only the checkpoint bucket. The agents may use only the bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext
from infra.options import TAG_DEPLOYMENT

EC2_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


@dataclass(frozen=True)
class Roles:
    master_role: aws.iam.Role
    master_profile: aws.iam.InstanceProfile
    agent_role: aws.iam.Role
    agent_profile: aws.iam.InstanceProfile


def bucket_statements(bucket_arn: str) -> list[dict[str, Any]]:
    """Checkpoints: list the bucket, read/write/delete its objects; nothing else in S3."""
    return [
        {"Sid": "CheckpointBucket", "Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": bucket_arn},
        {"Sid": "CheckpointObjects", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
         "Resource": f"{bucket_arn}/*"},
    ]


def agent_policy_document(bucket_arn: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": bucket_statements(bucket_arn)}


def master_policy_document(*, cluster_id: str, region: str, bucket_arn: str, agent_role_arn: str, image_id: str,
                           subnet_ids: list[str], agent_sg_id: str, spot: bool) -> dict[str, Any]:
    ec2 = f"arn:aws:ec2:{region}"
    tagged_here = {"StringEquals": {f"aws:ResourceTag/{TAG_DEPLOYMENT}": cluster_id}}
    statements: list[dict[str, Any]] = [
        # Describe* has no resource-level permissions in EC2.
        {"Sid": "Describe", "Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
        # What RunInstances creates must carry the deployment tag...
        {"Sid": "LaunchTaggedAgents", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:volume/*"],
         "Condition": {"StringEquals": {f"aws:RequestTag/{TAG_DEPLOYMENT}": cluster_id}}},
        # ...and what it uses must be this deployment's.
        {"Sid": "LaunchWithDeploymentResources", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": [f"{ec2}::image/{image_id}", f"{ec2}:*:security-group/{agent_sg_id}",
                      *(f"{ec2}:*:subnet/{s}" for s in subnet_ids), f"{ec2}:*:network-interface/*",
                      f"{ec2}:*:key-pair/*", f"{ec2}:*:spot-instances-request/*"]},
        {"Sid": "TagAtLaunchOnly", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:volume/*", f"{ec2}:*:spot-instances-request/*"],
         "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}}},
        {"Sid": "StopOwnAgents", "Effect": "Allow", "Action": ["ec2:TerminateInstances", "ec2:StopInstances"],
         "Resource": f"{ec2}:*:instance/*", "Condition": tagged_here},
        {"Sid": "PassAgentRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": agent_role_arn,
         "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        *bucket_statements(bucket_arn),
    ]
    if spot:
        # The first spot launch in an account creates EC2's spot service-linked role.
        statements.append({
            "Sid": "SpotServiceLinkedRole", "Effect": "Allow", "Action": "iam:CreateServiceLinkedRole",
            "Resource": "arn:aws:iam::*:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot",
            "Condition": {"StringLike": {"iam:AWSServiceName": "spot.amazonaws.com"}}})
    return {"Version": "2012-10-17", "Statement": statements}


def _role(ctx: AwsContext, role: str) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
    r = aws.iam.Role(ctx.name(f"{role}-role"), assume_role_policy=json.dumps(EC2_TRUST),
                     description=f"det {role} of {ctx.opts.cluster_id}", tags=ctx.tags(role), opts=ctx.res())
    profile = aws.iam.InstanceProfile(ctx.name(f"{role}-profile"), role=r.name, tags=ctx.tags(role), opts=ctx.res())
    return r, profile


def build_roles(ctx: AwsContext, *, bucket_arn: pulumi.Output[str], image_id: pulumi.Input[str],
                subnet_ids: list[pulumi.Output[str]], agent_sg_id: pulumi.Output[str]) -> Roles:
    opts = ctx.opts
    agent_role, agent_profile = _role(ctx, "agent")
    aws.iam.RolePolicy(ctx.name("agent-policy"), role=agent_role.id,
                       policy=bucket_arn.apply(lambda arn: json.dumps(agent_policy_document(arn))), opts=ctx.res())
    master_role, master_profile = _role(ctx, "master")
    policy = pulumi.Output.all(bucket_arn, agent_role.arn, image_id, agent_sg_id, *subnet_ids).apply(
        lambda v: json.dumps(master_policy_document(
            cluster_id=opts.cluster_id, region=opts.region, bucket_arn=v[0], agent_role_arn=v[1], image_id=v[2],
            agent_sg_id=v[3], subnet_ids=list(v[4:]), spot=opts.spot)))
    aws.iam.RolePolicy(ctx.name("master-policy"), role=master_role.id, policy=policy, opts=ctx.res())
    return Roles(master_role, master_profile, agent_role, agent_profile)
