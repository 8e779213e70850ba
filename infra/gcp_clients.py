"""Compute Engine clients for preflight and `down`, built in one place.

`endpoint` (tests: a local fake of the REST API) switches to the REST transport with anonymous
credentials; otherwise the clients use Application Default Credentials, which `credentials()`
loads first so that a missing login is reported as such. Imported lazily: the CLI starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GcpClients:
    endpoint: str | None = None

    def check_credentials(self) -> None:
        """Raise google.auth's error when no Application Default Credentials are found."""
        if self.endpoint:
            return
        import google.auth

        google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])

    def _client(self, name: str) -> Any:
        from google.cloud import compute_v1

        from provisioners.gce import client_kwargs

        return getattr(compute_v1, name)(**client_kwargs(self.endpoint))

    def instances(self) -> Any:
        return self._client("InstancesClient")

    def zone_operations(self) -> Any:
        return self._client("ZoneOperationsClient")

    def machine_types(self) -> Any:
        return self._client("MachineTypesClient")

    def accelerator_types(self) -> Any:
        return self._client("AcceleratorTypesClient")

    def regions(self) -> Any:
        return self._client("RegionsClient")
