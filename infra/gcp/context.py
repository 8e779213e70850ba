"""What every GCP resource of a deployment shares: the explicit provider (project, region and zone
as the flags say), the APIs it needs switched on first, and the labels `down` and `list` find."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from infra.options import TAG_DEPLOYMENT, TAG_ROLE, GcpOptions

APIS = ("compute.googleapis.com", "iam.googleapis.com", "storage.googleapis.com",
        "cloudresourcemanager.googleapis.com")
CLOUDSQL_APIS = ("sqladmin.googleapis.com", "servicenetworking.googleapis.com")


@dataclass(frozen=True)
class GcpContext:
    opts: GcpOptions
    provider: gcp.Provider
    apis: tuple[gcp.projects.Service, ...]

    @classmethod
    def create(cls, opts: GcpOptions) -> GcpContext:
        provider = gcp.Provider("gcp", project=opts.project_id, region=opts.region, zone=opts.zone)
        wanted = APIS + (CLOUDSQL_APIS if opts.db == "cloudsql" else ())
        # disable_on_destroy=False: `down` must not switch off an API other things in the project use.
        apis = tuple(gcp.projects.Service(f"{opts.cluster_id}-{api.split('.')[0]}", project=opts.project_id,
                                          service=api, disable_on_destroy=False,
                                          opts=pulumi.ResourceOptions(provider=provider)) for api in wanted)
        return cls(opts, provider, apis)

    def labels(self, role: str | None = None) -> dict[str, str]:
        labels = {**self.opts.labels, TAG_DEPLOYMENT: self.opts.cluster_id}
        if role:
            labels[TAG_ROLE] = role
        return labels

    def name(self, suffix: str) -> str:
        return f"{self.opts.cluster_id}-{suffix}"

    def short_id(self, role: str) -> str:
        """A service account id (6-30 characters): a cluster id of up to 40 is cut and a hash keeps it unique."""
        digest = hashlib.sha1(self.opts.cluster_id.encode()).hexdigest()[:4]
        return f"{self.opts.cluster_id[:15].rstrip('-')}-{digest}-{role}"[:30]

    def res(self, **kw: Any) -> pulumi.ResourceOptions:
        depends_on = [*self.apis, *kw.pop("depends_on", [])]
        return pulumi.ResourceOptions(provider=self.provider, depends_on=depends_on, **kw)
