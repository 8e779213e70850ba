"""The cloud instance this agent runs on: its identity and its interruption notice.

EC2 through IMDSv2 (a session token first: instances are launched with tokens required);
GCE through the metadata server (`Metadata-Flavor: Google`). The base URL is a parameter so
the boot simulator of the tests can serve a local metadata endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import requests

EC2_METADATA = "http://169.254.169.254"
GCE_METADATA = "http://metadata.google.internal"
TIMEOUT_S = 2.0


class MetadataError(RuntimeError):
    pass


@dataclass(frozen=True)
class InstanceMetadata:
    """One cloud's metadata server (``for_cloud`` picks the class): what differs is how a request
    is authorized, where the identity is and what an interruption notice looks like."""

    base_url: str
    cloud = ""
    DEFAULT_URL = ""
    IDENTITY_PATH = ""
    TYPE_PATH = ""

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _get(self, path: str) -> requests.Response:
        try:
            return requests.get(f"{self.base_url}{path}", timeout=TIMEOUT_S, headers=self._headers())
        except requests.RequestException as e:
            raise MetadataError(f"instance metadata unreachable at {self.base_url}: {e}") from e

    def instance_id(self) -> str:
        """EC2 instance id or GCE instance name: the agent id, so the master joins agents to instances."""
        r = self._get(self.IDENTITY_PATH)
        if r.status_code != 200 or not r.text.strip():
            raise MetadataError(f"cannot read the instance identity ({self.IDENTITY_PATH}: {r.status_code})")
        return r.text.strip()

    def instance_type(self) -> str:
        """The instance's type (EC2 instance-type, GCE machine-type's last part); "" when the
        metadata server does not say."""
        r = self._get(self.TYPE_PATH)
        return r.text.strip().rsplit("/", 1)[-1] if r.status_code == 200 else ""

    def interruption_notice(self) -> str | None:
        """A sentence when the cloud is taking the instance back (spot / preemptible), else None."""
        raise NotImplementedError


class Ec2Metadata(InstanceMetadata):
    cloud = "aws"
    DEFAULT_URL = EC2_METADATA
    IDENTITY_PATH = "/latest/meta-data/instance-id"
    TYPE_PATH = "/latest/meta-data/instance-type"

    def _headers(self) -> dict[str, str]:  # called within _get, which turns a RequestException into ours
        r = requests.put(f"{self.base_url}/latest/api/token", timeout=TIMEOUT_S,
                         headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        if r.status_code != 200:
            raise MetadataError(f"IMDSv2 token request failed with {r.status_code}")
        return {"X-aws-ec2-metadata-token": r.text}

    def interruption_notice(self) -> str | None:
        r = self._get("/latest/meta-data/spot/instance-action")
        if r.status_code != 200:
            return None  # 404 until an interruption is scheduled
        try:
            action = json.loads(r.text)
        except ValueError:
            action = {"action": r.text.strip()}
        return f"EC2 spot interruption: {action.get('action', 'terminate')} at {action.get('time', 'soon')}"


class GceMetadata(InstanceMetadata):
    cloud = "gcp"
    DEFAULT_URL = GCE_METADATA
    IDENTITY_PATH = "/computeMetadata/v1/instance/name"
    TYPE_PATH = "/computeMetadata/v1/instance/machine-type"  # projects/<number>/machineTypes/<type>

    def _headers(self) -> dict[str, str]:
        return {"Metadata-Flavor": "Google"}

    def interruption_notice(self) -> str | None:
        r = self._get("/computeMetadata/v1/instance/preempted")
        if r.status_code == 200 and r.text.strip().upper() == "TRUE":
            return "GCE preemption notice: the instance is being preempted"
        return None


BY_CLOUD: dict[str, type[InstanceMetadata]] = {c.cloud: c for c in (Ec2Metadata, GceMetadata)}


def for_cloud(cloud: str, metadata_url: str | None = None) -> InstanceMetadata:
    """The metadata server of ``cloud`` ("aws" or "gcp"), at ``metadata_url`` or its usual address."""
    kind = BY_CLOUD[cloud]
    return kind((metadata_url or kind.DEFAULT_URL).rstrip("/"))
