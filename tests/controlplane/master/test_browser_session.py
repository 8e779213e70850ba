"""Signing in to the web UI: the session cookie, the CSRF token that must go with it, and where a
browser without a session is sent."""

from __future__ import annotations

import contextlib
import re

import httpx

from controlplane.master import browser_session as web_session


@contextlib.asynccontextmanager
async def _sign_in(api, username: str = "determined", password: str = "", next_path: str = "/experiments"):
    """A browser (its own cookie jar) after posting the sign-in form: (client, the form's answer)."""
    async with httpx.AsyncClient(transport=api._transport, base_url="http://master") as browser:
        r = await browser.post("/login", data={"username": username, "password": password, "next": next_path})
        yield browser, r


async def test_sign_in_sets_an_httponly_strict_cookie_and_goes_to_next(api):
    async with _sign_in(api, next_path="/jobs") as (browser, r):
        assert r.status_code == 303 and r.headers["location"] == "/jobs"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{web_session.COOKIE}=")
        assert "HttpOnly" in cookie and re.search(r"SameSite=strict", cookie, re.I), cookie
        me = await browser.get("/api/v1/me")
        assert me.status_code == 200 and me.json()["user"]["username"] == "determined"


async def test_a_wrong_password_shows_the_form_again_with_a_message_and_no_cookie(api):
    async with _sign_in(api, password="wrong") as (browser, r):
        assert r.status_code == 401
        assert "Wrong username or password." in r.text and "set-cookie" not in r.headers
        assert 'value="determined"' in r.text  # the username is kept in the form


async def test_next_never_leaves_the_master(api):
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        async with _sign_in(api, next_path=target) as (browser, r):
            assert r.status_code == 303 and r.headers["location"] == "/", (target, r.headers["location"])


async def test_a_page_without_a_session_redirects_to_sign_in_but_the_api_answers_401(api):
    browser = httpx.AsyncClient(transport=api._transport, base_url="http://master")
    async with browser:
        page = await browser.get("/jobs?pool=default", headers={"Accept": "text/html,*/*;q=0.8"})
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Fjobs%3Fpool%3Ddefault"
        form = await browser.get(page.headers["location"])
        assert form.status_code == 200 and 'name="next" value="/jobs?pool=default"' in form.text
        assert (await browser.get("/api/v1/experiments")).status_code == 401
        assert (await browser.get("/jobs?pool=default")).status_code == 401  # not a browser: no redirect


async def test_session_cookies_tossed_in_by_a_task_page_neither_lock_out_nor_sign_in_as_another(api):
    """A task's page on the same site sets ``det_session`` for narrower paths (``/api``) with a
    ``Domain``; the browser sends those before the master's own. Junk is skipped (the person stays
    signed in); another user's live token beside the person's own signs nobody in, and signing in
    again (which ends every session the browser sent) works."""
    async with _sign_in(api) as (browser, _):
        mine = browser.cookies[web_session.COOKIE]
        csrf = {"X-CSRF-Token": web_session.csrf_token(mine)}
        junk = f"{web_session.COOKIE}=junk; {web_session.COOKIE}=more-junk; {web_session.COOKIE}={mine}"
        got = await browser.get("/api/v1/me", headers={"cookie": junk})
        assert got.status_code == 200 and got.json()["user"]["username"] == "determined", got.text
        r = await browser.post("/api/v1/experiments/999/pause", headers={"cookie": junk, **csrf})
        assert r.status_code == 404, r.text  # signed in, CSRF good: it reached the handler
        page = await browser.get("/jobs", headers={"cookie": junk, "Accept": "text/html"})
        assert page.status_code == 200 and web_session.csrf_token(mine) in page.text  # the page's own token

        async with _sign_in(api, "admin") as (other, _):
            someone_elses = other.cookies[web_session.COOKIE]
        both = {"cookie": f"{web_session.COOKIE}={someone_elses}; {web_session.COOKIE}={mine}"}
        got = await browser.get("/api/v1/me", headers=both)
        assert got.status_code == 401 and "sign in again" in got.json()["message"], got.text
        # Signing in again (the form, from this master's page) ends both; the new cookie works.
        again = await browser.post("/login", data={"username": "determined", "password": "", "next": "/"},
                                   headers={**both, "Origin": "http://master"})
        assert again.status_code == 303, again.text
        fresh = again.cookies[web_session.COOKIE]
        tossed_again = {"cookie": f"{web_session.COOKIE}={someone_elses}; {web_session.COOKIE}={fresh}"}
        got = await browser.get("/api/v1/me", headers=tossed_again)
        assert got.status_code == 200 and got.json()["user"]["username"] == "determined", got.text


async def test_the_cookie_changes_state_only_with_its_csrf_token(api):
    async with _sign_in(api) as (browser, _):
        token = browser.cookies[web_session.COOKIE]
        forged = await browser.post("/api/v1/experiments/999/pause")
        assert forged.status_code == 403 and "X-CSRF-Token" in forged.json()["message"]
        wrong = await browser.post("/api/v1/experiments/999/pause", headers={"X-CSRF-Token": "0" * 40})
        assert wrong.status_code == 403
        other_session = web_session.csrf_token("another session's token")
        stale = await browser.post("/api/v1/experiments/999/pause", headers={"X-CSRF-Token": other_session})
        assert stale.status_code == 403
        # With its token the request reaches the handler (no such experiment).
        own = {"X-CSRF-Token": web_session.csrf_token(token)}
        ok = await browser.post("/api/v1/experiments/999/pause", headers=own)
        assert ok.status_code == 404, ok.text
        assert (await browser.get("/api/v1/me")).status_code == 200  # reads need no token


async def test_sign_out_ends_the_session_itself(api):
    async with _sign_in(api) as (browser, _):
        token = browser.cookies[web_session.COOKIE]
        out = await browser.post("/logout", data={"csrf": web_session.csrf_token(token)})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        stolen = await api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert stolen.status_code == 401


async def test_sign_out_without_a_valid_csrf_token_still_ends_the_session(api):
    """Clicking sign-out never leaves the user signed in: from the master's page, or with no Origin at all."""
    for headers in ({"Origin": "http://master"}, {"Sec-Fetch-Site": "same-origin"}, {}):
        async with _sign_in(api) as (browser, _):
            token = browser.cookies[web_session.COOKIE]
            out = await browser.post("/logout", data={"csrf": "stale"}, headers=headers)
            assert out.status_code == 303 and out.headers["location"] == "/login", (headers, out.text)
            ended = await api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
            assert ended.status_code == 401, headers


async def test_a_sign_out_posted_by_another_site_is_refused_and_ends_nothing(api):
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Referer": "https://evil.example/page"}):
        async with _sign_in(api) as (browser, _):
            token = browser.cookies[web_session.COOKIE]
            out = await browser.post("/logout", data={"csrf": web_session.csrf_token(token)}, headers=headers)
            assert out.status_code == 403 and "another site" in out.text, (headers, out.text)
            assert "set-cookie" not in out.headers
            still = await api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
            assert still.status_code == 200, headers


async def test_a_sign_in_posted_by_another_site_is_refused_without_a_cookie(api):
    """Login CSRF: another site's page must not sign the browser in (as the attacker)."""
    async with httpx.AsyncClient(transport=api._transport, base_url="http://master") as browser:
        form = {"username": "determined", "password": "", "next": "/jobs"}
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site"}, {"Referer": "https://evil.example/login"}):
            r = await browser.post("/login", data=form, headers=headers)
            assert r.status_code == 403 and "sign-in refused" in r.text and "another site" in r.text, (headers, r.text)
            assert "set-cookie" not in r.headers and web_session.COOKIE not in browser.cookies, headers
        for headers in ({"Origin": "http://master"}, {"Sec-Fetch-Site": "same-origin"},
                        {"Referer": "http://master/login?next=%2Fjobs"}):
            r = await browser.post("/login", data=form, headers=headers)
            assert r.status_code == 303 and r.headers["location"] == "/jobs", (headers, r.text)
            assert r.headers["set-cookie"].startswith(f"{web_session.COOKIE}="), headers
        # Behind a proxy that rewrites Host, the master's public_url is its own origin too.
        api.rt.settings.public_url = "https://det.example.com"
        r = await browser.post("/login", data=form, headers={"Origin": "https://det.example.com"})
        assert r.status_code == 303, r.text


async def test_static_assets_are_served_by_the_master(api):
    for path in ("/static/vendor/htmx.min.js", "/static/vendor/uPlot.iife.min.js", "/static/vendor/uPlot.min.css",
                 "/static/app.js", "/static/app.css"):
        r = await api.get(path)
        assert r.status_code == 200 and len(r.content) > 100, path
    page = await api.get("/login")
    assert "http://" not in page.text and "https://" not in page.text  # nothing from another host


async def test_on_https_the_session_cookie_is_a_host_cookie_a_tossed_one_cannot_touch(api):
    """On https the session cookie is ``__Host-det_session`` (Secure, Path=/, host-only: no other
    host of the site can set one); a ``det_session`` a task's page tosses in is not read at all."""
    async with httpx.AsyncClient(transport=api._transport, base_url="https://master") as browser:
        r = await browser.post("/login", data={"username": "determined", "password": "", "next": "/"})
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{web_session.SECURE_COOKIE}=") and "Secure" in cookie and "Path=/" in cookie, cookie
        mine = browser.cookies[web_session.SECURE_COOKIE]
        async with _sign_in(api, "admin") as (other, _):
            someone_elses = other.cookies[web_session.COOKIE]
        tossed = {"cookie": f"{web_session.COOKIE}={someone_elses}; {web_session.SECURE_COOKIE}={mine}"}
        got = await browser.get("/api/v1/me", headers=tossed)
        assert got.status_code == 200 and got.json()["user"]["username"] == "determined", got.text
        only_tossed = await browser.get("/api/v1/me", headers={"cookie": f"{web_session.COOKIE}={someone_elses}"})
        assert only_tossed.status_code == 401, only_tossed.text
        out = await browser.post("/logout", data={}, headers={"Origin": "https://master"})
        expired = out.headers["set-cookie"]
        assert expired.startswith(f"{web_session.SECURE_COOKIE}=") and "Max-Age=0" in expired, expired
