"""The fake master's model registry: `/api/v1/models...` with the master's shapes and rules.

Three checkpoints exist: two completed ones of experiments 1 and 2, and one still active.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote

NOW = "2025-03-20T12:00:00.000000Z"


def checkpoint(uuid: str, exp_id: int, steps: int, loss: float, state: str = "STATE_COMPLETED") -> dict:
    return {"uuid": uuid, "state": state, "metadata": {"steps_completed": steps}, "resources": {"model.pt": "2048"},
            "reportTime": NOW, "training": {"trialId": exp_id * 10, "experimentId": exp_id,
                                            "experimentConfig": {"searcher": {"metric": "loss"}},
                                            "validationMetrics": {"avgMetrics": {"loss": loss}}}}


def default_checkpoints() -> dict[str, dict]:
    return {"ckpt-uuid-1": checkpoint("ckpt-uuid-1", 1, 300, 0.25),
            "ckpt-uuid-2": checkpoint("ckpt-uuid-2", 2, 100, 0.5),
            "ckpt-active": checkpoint("ckpt-active", 2, 50, 0.9, "STATE_ACTIVE")}


def _page(items: list, q: dict[str, list[str]]) -> tuple[list, dict]:
    offset, limit = int(q.get("offset", ["0"])[0]), int(q.get("limit", ["0"])[0])
    page = items[offset:offset + limit] if limit else items[offset:]
    return page, {"offset": offset, "limit": limit, "startIndex": offset, "endIndex": offset + len(page),
                  "total": len(items)}


@dataclass
class FakeRegistry:
    checkpoints: dict[str, dict] = field(default_factory=default_checkpoints)
    models: list[dict] = field(default_factory=list)
    versions: dict[int, list[dict]] = field(default_factory=dict)  # model id -> versions
    page_cap: int = 0  # >0: serve at most this many models a page (to exercise paging)

    def _find(self, ident: str) -> dict | None:
        ident = unquote(ident)
        return next((m for m in self.models if (str(m["id"]) if ident.isdigit() else m["name"]) == ident), None)

    def _model(self, m: dict) -> dict:
        return {**m, "numVersions": len(self.versions.get(m["id"], []))}

    def _version(self, m: dict, v: dict) -> dict:
        return {**v, "model": self._model(m)}

    def handle(self, method: str, rest: list[str], q: dict[str, list[str]], raw: bytes,
               username: str) -> tuple[int, dict]:
        body = json.loads(raw) if raw else {}
        if not rest and method == "POST":
            return self._create(body, username)
        if not rest and method == "GET":
            models = [self._model(m) for m in self.models]
            sort = q.get("sortBy", ["SORT_BY_UNSPECIFIED"])[0]
            if sort == "SORT_BY_NAME":
                models.sort(key=lambda m: m["name"])
            if q.get("orderBy", [""])[0] == "ORDER_BY_DESC":
                models.reverse()
            if self.page_cap:
                q = {**q, "limit": [str(min(int(q.get("limit", ["0"])[0]) or self.page_cap, self.page_cap))]}
            page, pagination = _page(models, q)
            return 200, {"models": page, "pagination": pagination}
        m = self._find(rest[0])
        if m is None:
            return 404, {"message": f"model {unquote(rest[0])!r} not found"}
        if len(rest) == 1:
            if method == "GET":
                return 200, {"model": self._model(m)}
            if method == "PATCH":
                if body.get("name") and body["name"] != m["name"] and self._find(body["name"]):
                    return 409, {"message": f"name: a model named {body['name']!r} already exists"}
                m.update({k: v for k, v in body.items() if v is not None})
                return 200, {"model": self._model(m)}
            if method == "DELETE":
                self.models.remove(m)
                self.versions.pop(m["id"], None)
                return 200, {}
        versions = self.versions.setdefault(m["id"], [])
        if len(rest) == 2 and method == "POST":
            ckpt = self.checkpoints.get(body.get("checkpointUuid"))
            if ckpt is None:
                return 404, {"message": f"checkpointUuid: checkpoint {body.get('checkpointUuid')} not found"}
            if ckpt["state"] != "STATE_COMPLETED":
                return 400, {"message": f"checkpointUuid: checkpoint {ckpt['uuid']} is {ckpt['state']}; "
                                        f"only a STATE_COMPLETED checkpoint can be registered"}
            v = {"id": len(versions) + 100 * m["id"], "version": len(versions) + 1, "checkpoint": ckpt,
                 "name": body.get("name") or "", "comment": body.get("comment") or "", "notes": body.get("notes") or "",
                 "metadata": body.get("metadata") or {}, "labels": body.get("labels") or [], "username": username,
                 "userId": 2, "creationTime": NOW, "lastUpdatedTime": NOW}
            versions.append(v)
            return 200, {"modelVersion": self._version(m, v)}
        if len(rest) == 2 and method == "GET":
            ordered = sorted(versions, key=lambda v: v["version"], reverse=q.get("orderBy") == ["ORDER_BY_DESC"])
            page, pagination = _page(ordered, q)
            return 200, {"model": self._model(m), "modelVersions": [self._version(m, v) for v in page],
                         "pagination": pagination}
        if len(rest) == 3:
            v = next((v for v in versions if str(v["version"]) == rest[2]), None)
            if v is None:
                return 404, {"message": f"model {m['name']!r} has no version {rest[2]}"}
            if method == "DELETE":
                versions.remove(v)
                return 200, {}
            return 200, {"modelVersion": self._version(m, v)}
        return 404, {"message": f"no route {method} /api/v1/models/{'/'.join(rest)}"}

    def _create(self, body: dict, username: str) -> tuple[int, dict]:
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            return 400, {"message": "name: required, a non-empty string"}
        if self._find(name) is not None:
            return 409, {"message": f"name: a model named {name!r} already exists"}
        model = {"id": len(self.models) + 1, "name": name, "description": body.get("description") or "",
                 "notes": body.get("notes") or "", "metadata": body.get("metadata") or {},
                 "labels": body.get("labels") or [], "creationTime": NOW, "lastUpdatedTime": NOW,
                 "username": username, "userId": 2, "archived": False, "workspaceId": 1}
        self.models.append(model)
        return 200, {"model": self._model(model)}
