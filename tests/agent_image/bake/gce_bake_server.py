"""The tests' Compute Engine endpoint (tests/provisioners/gce_server.py, which serves instances stop)
plus what else a bake calls: getGuestAttributes, images insert/get/delete, and global operations.

Inserted instances get a boot disk `source` and an external address, as GCE gives them. The
builder's host keys are served as guest attributes when `state.host_keys` names them (else a 404,
as before the guest agent has published them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.provisioners.gce_server import GceState, GceTestServer, _Handler

_BASE = "/compute/v1/projects/(?P<p>[^/]+)"
_EXTRA = [
    ("GET", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances/(?P<n>[^/]+)/getGuestAttributes$"), "guest"),
    ("POST", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances$"), "insert_with_disk"),
    ("POST", re.compile(_BASE + r"/global/images$"), "image_insert"),
    ("GET", re.compile(_BASE + r"/global/images/(?P<n>[^/]+)$"), "image_get"),
    ("DELETE", re.compile(_BASE + r"/global/images/(?P<n>[^/]+)$"), "image_delete"),
    ("GET", re.compile(_BASE + r"/global/operations/(?P<o>[^/]+)$"), "op"),
    ("POST", re.compile(_BASE + r"/global/operations/(?P<o>[^/]+)/wait$"), "op"),
]


@dataclass
class BakeGceState(GceState):
    images: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    host_keys: dict[str, str] = field(default_factory=dict)  # key type -> base64, for getGuestAttributes


class _BakeHandler(_Handler):
    state: BakeGceState

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        for m, rx, name in _EXTRA:
            match = rx.match(url.path)
            if m == method and match:
                self.state.requests.append((method, url.path))
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with self.state.lock:
                    getattr(self, f"_h_{name}")(match.groupdict(), query)
                return
        super()._dispatch(method)

    def _h_insert_with_disk(self, g: dict[str, str], q: dict[str, str]) -> None:
        self._h_insert(g, q)
        inst = self.state.instances.get((g["p"], g["z"], self._last_name))
        if inst is not None:
            disk = f"https://compute.googleapis.com/compute/v1/projects/{g['p']}/zones/{g['z']}/disks/{inst['name']}"
            inst["disks"] = [{**d, "source": disk} for d in inst.get("disks", [])]
            for nic in inst.get("networkInterfaces", []):
                for access in nic.get("accessConfigs", []):
                    access["natIP"] = "203.0.113.10"

    def _body(self) -> dict[str, Any]:
        body = super()._body()
        self._last_name = body.get("name", "")
        return body

    def _h_guest(self, g: dict[str, str], q: dict[str, str]) -> None:
        if not self.state.host_keys or q.get("queryPath") != "hostkeys/":
            return self._error(404, "The resource was not found", "notFound")
        items = [{"namespace": "hostkeys", "key": k, "value": v} for k, v in self.state.host_keys.items()]
        self._send(200, {"kind": "compute#guestAttributes", "queryPath": "hostkeys/", "queryValue": {"items": items}})

    def _h_image_insert(self, g: dict[str, str], _q: dict[str, str]) -> None:
        body = self._body()
        link = f"https://compute.googleapis.com/compute/v1/projects/{g['p']}/global/images/{body['name']}"
        if (g["p"], body["name"]) in self.state.images:
            return self._error(409, f"The resource '{body['name']}' already exists", "alreadyExists")
        self.state.images[(g["p"], body["name"])] = {**body, "kind": "compute#image", "id": str(next(self.ids)),
                                                     "status": "READY", "selfLink": link}
        self._send(200, self._op(g["p"], "global", link, "insert"))

    def _h_image_get(self, g: dict[str, str], _q: dict[str, str]) -> None:
        image = self.state.images.get((g["p"], g["n"]))
        if image is None:
            return self._error(404, f"The resource '{g['n']}' was not found", "notFound")
        self._send(200, image)

    def _h_image_delete(self, g: dict[str, str], _q: dict[str, str]) -> None:
        image = self.state.images.pop((g["p"], g["n"]), None)
        if image is None:
            return self._error(404, f"The resource '{g['n']}' was not found", "notFound")
        self._send(200, self._op(g["p"], "global", image["selfLink"], "delete"))


class BakeGceServer(GceTestServer):
    """`with BakeGceServer() as srv:` -> srv.url, srv.state (a BakeGceState)."""

    state_class = BakeGceState
    handler_class = _BakeHandler
    state: BakeGceState
