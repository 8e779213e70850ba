"""The real master app (``create_app`` on SQLite) served on loopback from a thread, for CLI tests.

The CLI talks HTTP with ``requests``, so the app is served by uvicorn on a free port; its lifespan
starts and stops the runtime on the server thread's own loop. Nothing is faked: the commands meet
the routes, rules and database a cluster runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import requests
import uvicorn

from controlplane.master.app import create_app
from controlplane.master.settings import MasterSettings
from tests.support.cluster import free_port


class RealMaster:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = MasterSettings(data_dir=data_dir, db_url=f"sqlite:///{data_dir}/master.db", join_token="t")
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="real-master", daemon=True)

    def __enter__(self) -> RealMaster:
        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.thread.is_alive():
                raise RuntimeError("the master's server thread ended at start")
            try:
                if requests.get(f"{self.url}/info", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("the master did not answer /info in 30 s")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def login(self, username: str, password: str = "") -> dict:
        r = requests.post(f"{self.url}/api/v1/auth/login", json={"username": username, "password": password},
                          timeout=10)
        r.raise_for_status()
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def add_user(self, username: str, role: str, password: str = "pw") -> None:
        r = requests.post(f"{self.url}/api/v1/users", headers=self.login("admin"), timeout=10,
                          json={"user": {"username": username, "role": role}, "password": password,
                                "isHashed": False})
        r.raise_for_status()
