"""The API docs page works offline: its pages load scripts, styles and icons from the master only,
and those assets are served (no CDN, no web font)."""

from __future__ import annotations

import re

import pytest

ASSET = re.compile(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""")


@pytest.mark.parametrize("page", ["/docs", "/docs/swagger", "/docs/redoc"])
async def test_docs_pages_load_only_the_masters_own_assets(api, page):
    api.headers.pop("Authorization")  # the docs are public
    r = await api.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    head = r.text.split("<body", 1)[0]
    assets = ASSET.findall(r.text)
    assert assets, "the page loads its UI from somewhere"
    outside = [a for a in assets if not a.startswith("/")]
    assert not outside, f"assets from outside the master: {outside}"
    assert not re.search(r"https?://", head), "the page head names an outside URL"
    for asset in assets:
        got = await api.get(asset)
        assert got.status_code == 200 and len(got.content) > 0, asset
    assert "/api/v1/experiments" in r.text  # the schema itself is in the page


async def test_docs_assets_are_only_the_bundles_files(api):
    assert (await api.get("/docs/static/swagger-ui/../../../../etc/passwd")).status_code == 404
    assert (await api.get("/docs/static/redoc/nothing-here.js")).status_code == 404
