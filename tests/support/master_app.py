"""The in-process master of the API tests, built cheaply: one Litestar app per test process and a
new runtime per test (its database copied from a migrated template: tests/support/databases.py).

Building the app (routing, signature models for every handler) was a large part of an API test's
set-up; what a test can observe (the runtime, its settings, its database) is still its own. A test
that needs an app of its own (a setting only ``create_app`` reads) calls ``create_app`` itself.
"""

from __future__ import annotations

from litestar import Litestar

from controlplane.master.api import task_proxy
from controlplane.master.app import build_runtime, create_app
from controlplane.master.settings import MasterSettings

_APP: Litestar | None = None


def app_with_runtime(settings: MasterSettings) -> Litestar:
    """This process's app, now serving a new (not yet started) runtime for ``settings``."""
    global _APP
    if _APP is None:
        _APP = create_app(settings)
    else:
        _APP.state.runtime = build_runtime(settings)
    return _APP


async def release(app: Litestar) -> None:
    """Drop what a test left on the shared app that is bound to its event loop (the proxy's client)."""
    await task_proxy.close_client(app)
