"""A REST client signed in to a real master, for cluster scenarios: answers as JSON, an error answer
raises naming the route. Scenarios subclass it with their own calls."""

from __future__ import annotations

import json

import requests

from tests.support.cluster import login


class SignedInClient:
    timeout_s = 30.0  # per request; a scenario with a slower master sets its own

    def __init__(self, url: str) -> None:
        self.url = url
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Bearer {login(url)}"

    def get(self, path: str) -> dict:
        r = self.s.get(f"{self.url}{path}", timeout=self.timeout_s)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: dict) -> dict:
        r = self.s.post(f"{self.url}{path}", json=body, timeout=self.timeout_s)
        assert r.status_code == 200, f"POST {path}: {r.status_code} {r.text[:500]}"
        return r.json()

    def trial_logs(self, trial_id: int) -> str:
        """A trial's whole log as one text (the NDJSON stream's lines joined)."""
        r = self.s.get(f"{self.url}/api/v1/trials/{trial_id}/logs", timeout=2 * self.timeout_s)
        r.raise_for_status()
        return "".join(json.loads(line)["result"]["log"] for line in r.text.splitlines() if line.strip())
