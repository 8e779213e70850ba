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
    cloud: str  # "aws" | "gcp"
    base_url: str

    def _ec2_token(self) -> str:
        r = requests.put(f"{self.base_url}/latest/api/token", timeout=TIMEOUT_S,
                         headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        if r.status_code != 200:
            raise MetadataError(f"IMDSv2 token request failed with {r.status_code}")
        return r.text

    def _get(self, path: str) -> requests.Response:
        try:
            if self.cloud == "aws":
                return requests.get(f"{self.base_url}{path}", timeout=TIMEOUT_S,
                                    headers={"X-aws-ec2-metadata-token": self._ec2_token()})
            return requests.get(f"{self.base_url}{path}", timeout=TIMEOUT_S, headers={"Metadata-Flavor": "Google"})
        except requests.RequestException as e:
            raise MetadataError(f"instance metadata unreachable at {self.base_url}: {e}") from e

    def instance_id(self) -> str:
        """EC2 instance id or GCE instance name: the agent id, so the master joins agents to instances."""
        path = "/latest/meta-data/instance-id" if self.cloud == "aws" else "/computeMetadata/v1/instance/name"
        r = self._get(path)
        if r.status_code != 200 or not r.text.strip():
            raise MetadataError(f"cannot read the instance identity ({path}: {r.status_code})")
        return r.text.strip()

    def interruption_notice(self) -> str | None:
        """A sentence when the cloud is taking the instance back (spot / preemptible), else None."""
        if self.cloud == "aws":
            r = self._get("/latest/meta-data/spot/instance-action")
            if r.status_code != 200:
                return None  # 404 until an interruption is scheduled
            try:
                action = json.loads(r.text)
            except ValueError:
                action = {"action": r.text.strip()}
            return f"EC2 spot interruption: {action.get('action', 'terminate')} at {action.get('time', 'soon')}"
        r = self._get("/computeMetadata/v1/instance/preempted")
        if r.status_code == 200 and r.text.strip().upper() == "TRUE":
            return "GCE preemption notice: the instance is being preempted"
        return None
