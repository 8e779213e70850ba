"""Signing in and out in a real browser, and the API docs page, all served by the master alone."""

from __future__ import annotations

import re

import pytest

from tests.support.cluster import MasterProcess, database_for

# SQLite (the default): the pages and the processes behind them are under test, not SQL.
# The module shares a master (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_sign_in")]


@pytest.fixture(scope="module")
def master(request, tmp_path_factory):
    """One master for the module: each test signs in (or fails to) in a browser context of its own."""
    data = tmp_path_factory.mktemp("master")
    with database_for(request.node, data / "db") as db_url:
        m = MasterProcess(data / "master", db_url).start()
        try:
            yield m
        finally:
            m.stop()


def test_sign_in_lands_on_experiments_and_sign_out_ends_the_session(ui, master):
    s = ui(master.url)
    page = s.page
    assert page.locator("header .who").inner_text().startswith("determined")
    assert s.cookie("det_session")
    page.click("header .who button[type=submit]")
    page.wait_for_url(re.compile(r".*/login$"))
    assert s.cookie("det_session") is None
    page.goto("/experiments")  # no session: back to the form, which says where it will return
    page.wait_for_url(re.compile(r".*/login\?next=%2Fexperiments$"))
    assert page.input_value("input[name=next]") == "/experiments"


def test_a_wrong_password_says_so_on_the_form(chromium, master):
    context = chromium.new_context(base_url=master.url)
    try:
        page = context.new_page()
        page.goto("/login")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", "not-the-password")
        page.click("button[type=submit]")
        assert page.locator("p.error").inner_text() == "Wrong username or password."
        assert not [c for c in context.cookies() if c["name"] == "det_session"]
    finally:
        context.close()


def test_the_api_docs_page_renders_offline(ui, master):
    s = ui(master.url)
    s.page.goto("/docs")
    s.page.wait_for_selector(".swagger-ui .info .title")
    assert "controlplane master" in s.page.locator(".swagger-ui .info .title").inner_text()
    s.page.wait_for_selector(".opblock-tag")  # the operations, from /docs/openapi.json
