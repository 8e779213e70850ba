"""The API docs page, offline: Swagger UI and Redoc served by the master itself, no CDN.

The assets come from the ``openapi-ui-bundles`` package (Swagger UI 5, which reads OpenAPI 3.1,
and Redoc's standalone bundle) and are served under ``/docs/static/``; the pages reference
nothing outside the master (no CDN script, font or favicon). ``/docs`` is Swagger UI,
``/docs/redoc`` is Redoc, ``/docs/openapi.json`` the schema itself.
"""

from __future__ import annotations

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin
from litestar.router import Router
from litestar.static_files import create_static_files_router
from openapi_ui_bundles import redoc, swagger_ui

from controlplane.master.authz import Action, opt

DOCS = "/docs"
STATIC = f"{DOCS}/static"
SWAGGER_STATIC = f"{STATIC}/swagger-ui"
REDOC_STATIC = f"{STATIC}/redoc"
FAVICON = f"<link rel='icon' type='image/png' href='{SWAGGER_STATIC}/favicon-32x32.png'>"


def openapi_config(title: str, version: str) -> OpenAPIConfig:
    return OpenAPIConfig(
        title=title, version=version, path=DOCS,
        render_plugins=[
            SwaggerRenderPlugin(path=["/", "/swagger"], js_url=f"{SWAGGER_STATIC}/swagger-ui-bundle.js",
                                css_url=f"{SWAGGER_STATIC}/swagger-ui.css",
                                standalone_preset_js_url=f"{SWAGGER_STATIC}/swagger-ui-standalone-preset.js",
                                favicon=FAVICON),
            RedocRenderPlugin(path="/redoc", js_url=f"{REDOC_STATIC}/redoc.standalone.js", google_fonts=False,
                              favicon=FAVICON),
        ],
    )


def asset_routers() -> list[Router]:
    """The bundles' files, public like the docs page itself."""
    return [
        create_static_files_router(path=SWAGGER_STATIC, directories=[swagger_ui.static_path], name="docs-swagger-ui",
                                   opt=opt(Action.PUBLIC), include_in_schema=False),
        create_static_files_router(path=REDOC_STATIC, directories=[redoc.static_path], name="docs-redoc",
                                   opt=opt(Action.PUBLIC), include_in_schema=False),
    ]
