"""What every AWS resource of a deployment shares: the explicit provider (so the region is the
one `--region` says, whatever the stack's config holds) and the tags `down` and `list` find."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.options import TAG_DEPLOYMENT, TAG_ROLE, AwsOptions


@dataclass(frozen=True)
class AwsContext:
    opts: AwsOptions
    provider: aws.Provider

    @classmethod
    def create(cls, opts: AwsOptions) -> AwsContext:
        return cls(opts, aws.Provider("aws", region=opts.region))

    def tags(self, role: str | None = None, name: str | None = None) -> dict[str, str]:
        tags = {**self.opts.tags, TAG_DEPLOYMENT: self.opts.cluster_id}
        if role:
            tags[TAG_ROLE] = role
        if name:
            tags["Name"] = f"{self.opts.cluster_id}-{name}"
        return tags

    def name(self, suffix: str) -> str:
        """A resource's Pulumi name: the cluster id keeps two deployments in one account apart."""
        return f"{self.opts.cluster_id}-{suffix}"

    def res(self, **kw: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(provider=self.provider, **kw)

    def invoke(self) -> pulumi.InvokeOutputOptions:
        return pulumi.InvokeOutputOptions(provider=self.provider)
