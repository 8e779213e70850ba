"""Every handler of the web UI, for create_app: the pages, and the static files (public: they
carry no data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.static_files import create_static_files_router

from controlplane.master.authz import Action, opt
from controlplane.master.webui.pages import cluster, determined_paths, experiment_pages, jobs, login, models, pai

STATIC = Path(__file__).parent / "static"


def all_routes() -> list[Any]:
    static = create_static_files_router(path="/static", directories=[STATIC], name="webui-static",
                                        opt=opt(Action.PUBLIC), include_in_schema=False,
                                        cache_control=None)
    return [*login.ROUTES, *jobs.ROUTES, *cluster.ROUTES, *models.ROUTES, *pai.ROUTES, *experiment_pages.ROUTES,
            *determined_paths.ROUTES, static]
