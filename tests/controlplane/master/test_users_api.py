"""Users over Determined's /api/v1/users paths: roles, activation, passwords and sessions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controlplane.master.services import auth
from controlplane.master.services import users as users_service


async def login(api, username: str, password: str = "") -> str:
    r = await api.post("/api/v1/auth/login", json={"username": username, "password": password, "isHashed": False})
    assert r.status_code == 200, r.text
    return r.json()["token"]


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def create_user(api, admin_token: str, username: str, *, password: str = "", role: str | None = None,
                      admin: bool = False) -> int:
    user: dict = {"username": username, "admin": admin, "active": True}
    if role is not None:
        user["role"] = role
    r = await api.post("/api/v1/users", json={"user": user, "password": password, "isHashed": False},
                       headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    return r.json()["user"]["id"]


@pytest.fixture
async def admin(api) -> str:
    return await login(api, "admin")


@pytest.mark.both_databases  # users listed in pages and found by name: ordering and collation
async def test_admin_creates_users_that_are_listed_paged_and_found_by_id_and_name(api, admin):
    alice = await create_user(api, admin, "alice", password="pw")
    await create_user(api, admin, "vera", role="viewer")
    await create_user(api, admin, "root2", admin=True)
    r = await api.get("/api/v1/users", params={"limit": 2, "offset": 1})
    assert r.status_code == 200, r.text
    page = r.json()
    assert [u["username"] for u in page["users"]] == ["determined", "alice"]
    assert page["pagination"]["total"] == 5 and page["pagination"]["endIndex"] == 3
    by_name = {u["username"]: u for u in (await api.get("/api/v1/users")).json()["users"]}
    assert (by_name["vera"]["role"], by_name["vera"]["admin"]) == ("viewer", False)
    assert (by_name["root2"]["role"], by_name["root2"]["admin"]) == ("admin", True)
    assert (await api.get(f"/api/v1/users/{alice}")).json()["user"]["username"] == "alice"
    assert (await api.get("/api/v1/users/alice/by-username")).json()["user"]["id"] == alice
    users = (await api.get("/api/v1/users", params={"name": "LIC"})).json()["users"]
    assert [u["username"] for u in users] == ["alice"]
    assert (await api.get("/api/v1/users/nobody/by-username")).status_code == 404
    await login(api, "alice", "pw")
    r = await api.post("/api/v1/users", json={"user": {"username": "alice"}}, headers=bearer(admin))
    assert r.status_code == 409 and "alice" in r.json()["message"]


async def test_only_an_admin_creates_users_or_changes_someone_else(api, admin):
    bob = await create_user(api, admin, "bob")
    # api is signed in as "determined", an ordinary user
    assert (await api.post("/api/v1/users", json={"user": {"username": "mallory"}})).status_code == 403
    assert (await api.patch(f"/api/v1/users/{bob}", json={"active": False})).status_code == 403
    assert (await api.patch(f"/api/v1/users/{bob}", json={"displayName": "Bobby"})).status_code == 403
    me = (await api.get("/api/v1/me")).json()["user"]["id"]
    r = await api.patch(f"/api/v1/users/{me}", json={"role": "admin"})
    assert r.status_code == 403 and "role" in r.json()["message"]
    r = await api.patch(f"/api/v1/users/{me}", json={"displayName": "Det"})
    assert r.status_code == 200 and r.json()["user"]["displayName"] == "Det"
    assert (await api.post(f"/api/v1/users/{bob}/password", json="x")).status_code == 403


async def test_deactivating_a_user_ends_their_sessions_at_once(api, admin):
    carol = await create_user(api, admin, "carol", password="pw")
    token = await login(api, "carol", "pw")
    assert (await api.get("/api/v1/me", headers=bearer(token))).status_code == 200  # now cached
    r = await api.patch(f"/api/v1/users/{carol}", json={"active": False}, headers=bearer(admin))
    assert r.status_code == 200 and r.json()["user"]["active"] is False
    assert (await api.get("/api/v1/me", headers=bearer(token))).status_code == 401
    r = await api.post("/api/v1/auth/login", json={"username": "carol", "password": "pw", "isHashed": False})
    assert r.status_code == 401
    await api.patch(f"/api/v1/users/{carol}", json={"active": True}, headers=bearer(admin))
    await login(api, "carol", "pw")


async def test_a_new_role_counts_on_the_next_request(api, admin):
    dave = await create_user(api, admin, "dave", password="pw")
    token = await login(api, "dave", "pw")
    body = {"user": {"username": "x1"}}
    assert (await api.post("/api/v1/users", json=body, headers=bearer(token))).status_code == 403
    r = await api.patch(f"/api/v1/users/{dave}", json={"role": "admin"}, headers=bearer(admin))
    assert r.status_code == 200 and r.json()["user"]["admin"] is True
    assert (await api.post("/api/v1/users", json=body, headers=bearer(token))).status_code == 200
    await api.patch(f"/api/v1/users/{dave}", json={"role": "viewer"}, headers=bearer(admin))
    r = await api.patch(f"/api/v1/users/{dave}", json={"displayName": "D"}, headers=bearer(token))
    assert r.status_code == 200  # a viewer still manages their own account
    r = await api.patch(f"/api/v1/users/{dave}", json={"password": "pw2", "oldPassword": "pw"}, headers=bearer(token))
    assert r.status_code == 200, r.text
    assert (await api.post("/api/v1/models", json={"name": "m"}, headers=bearer(token))).status_code == 403


async def test_changing_ones_own_password_needs_the_old_one_and_ends_the_other_sessions(api, admin, monkeypatch):
    erin = await create_user(api, admin, "erin", password="old")
    here, elsewhere = await login(api, "erin", "old"), await login(api, "erin", "old")
    assert (await api.get("/api/v1/me", headers=bearer(elsewhere))).status_code == 200  # now cached
    r = await api.patch(f"/api/v1/users/{erin}", json={"password": "new", "oldPassword": "wrong"}, headers=bearer(here))
    assert r.status_code == 403 and "oldPassword" in r.json()["message"]
    # Eleven minutes on, the sign-in no longer stands in for the old password: a leaked token cannot.
    later = users_service.utcnow() + timedelta(minutes=11)
    with monkeypatch.context() as m:
        m.setattr(users_service, "utcnow", lambda: later)
        r = await api.patch(f"/api/v1/users/{erin}", json={"password": "new"}, headers=bearer(here))
        assert r.status_code == 403 and "oldPassword" in r.json()["message"], r.text
        assert "det user login" in r.json()["message"]
        r = await api.post(f"/api/v1/users/{erin}/password", json="new", headers=bearer(here))  # bare string
        assert r.status_code == 403
        r = await api.patch(f"/api/v1/users/{erin}", json={"password": "new", "oldPassword": "old"},
                            headers=bearer(here))
        assert r.status_code == 200, r.text
    assert (await api.get("/api/v1/me", headers=bearer(here))).status_code == 200
    assert (await api.get("/api/v1/me", headers=bearer(elsewhere))).status_code == 401
    r = await api.post("/api/v1/auth/login", json={"username": "erin", "password": "old", "isHashed": False})
    assert r.status_code == 401
    await login(api, "erin", "new")
    # The Determined client's shape: POST .../password with an object carrying the salted hashes.
    r = await api.post(f"/api/v1/users/{erin}/password", headers=bearer(here), json={
        "password": auth.client_password_value("newer", False), "oldPassword": auth.client_password_value("new", False),
        "isHashed": True})
    assert r.status_code == 200, r.text
    await login(api, "erin", "newer")


async def test_a_fresh_login_changes_ones_password_as_determineds_client_sends_it(api, admin):
    """``det user change-password`` and the SDK's ``change_password`` PATCH only the new salted hash."""
    gail = await create_user(api, admin, "gail", password="Old-pass1")
    fresh = await login(api, "gail", "Old-pass1")
    r = await api.patch(f"/api/v1/users/{gail}", headers=bearer(fresh),
                        json={"password": auth.client_password_value("New-pass2", False), "isHashed": True})
    assert r.status_code == 200, r.text
    await login(api, "gail", "New-pass2")


async def test_a_fresh_account_sets_its_first_password_as_the_determined_client_does(api, admin):
    me = (await api.get("/api/v1/me")).json()["user"]["id"]  # "determined", empty password
    r = await api.patch(f"/api/v1/users/{me}", json={"password": auth.client_password_value("s3cret", False),
                                                     "isHashed": True})
    assert r.status_code == 200, r.text
    assert (await api.get("/api/v1/me")).status_code == 200  # the session that changed it lives on
    await login(api, "determined", "s3cret")


async def test_an_admin_resets_someone_elses_password_without_the_old_one(api, admin):
    frank = await create_user(api, admin, "frank", password="forgotten")
    token = await login(api, "frank", "forgotten")
    r = await api.post(f"/api/v1/users/{frank}/password", json={"password": "reset", "isHashed": False},
                       headers=bearer(admin))
    assert r.status_code == 200, r.text
    assert (await api.get("/api/v1/me", headers=bearer(token))).status_code == 401
    await login(api, "frank", "reset")


async def test_the_last_active_admin_cannot_be_demoted_or_deactivated(api, admin):
    r = await api.patch("/api/v1/users/1", json={"active": False}, headers=bearer(admin))
    assert r.status_code == 409 and "last active admin" in r.json()["message"]
    assert (await api.patch("/api/v1/users/1", json={"role": "user"}, headers=bearer(admin))).status_code == 409
    await create_user(api, admin, "second-admin", admin=True)
    assert (await api.patch("/api/v1/users/1", json={"role": "user"}, headers=bearer(admin))).status_code == 200


async def test_a_login_costs_one_password_hash_whether_or_not_the_user_exists(api, admin, monkeypatch):
    calls = []
    real = auth._scrypt
    monkeypatch.setattr(auth, "_scrypt", lambda value, salt: calls.append(value) or real(value, salt))
    gone = await create_user(api, admin, "gone", password="pw")
    await api.patch(f"/api/v1/users/{gone}", json={"active": False}, headers=bearer(admin))
    for username in ("admin", "no-such-user", "gone"):
        calls.clear()
        r = await api.post("/api/v1/auth/login", json={"username": username, "password": "wrong", "isHashed": False})
        assert r.status_code == 401 and r.json()["message"] == "invalid credentials"
        assert len(calls) == 1, username


@pytest.mark.parametrize("method,path,body,field", [
    ("POST", "/api/v1/users", {"user": {"username": "has space"}}, "user.username"),
    ("POST", "/api/v1/users", {"user": {"username": "nul\u0000"}}, "user.username"),
    ("POST", "/api/v1/users", {"user": {"username": "x", "role": "god"}}, "user.role"),
    ("POST", "/api/v1/users", {"user": {"username": "x", "admin": True, "role": "viewer"}}, "admin"),
    ("POST", "/api/v1/users", [1, 2], "object"),
    ("PATCH", "/api/v1/users/2", {"displayName": "a\u0000"}, "displayName"),
    ("PATCH", "/api/v1/users/2", {"active": "yes"}, "active"),
    ("GET", "/api/v1/users?limit=100000", None, "limit"),
    ("GET", "/api/v1/users?offset=-1", None, "offset"),
    ("GET", "/api/v1/users/99999999999999999999", None, "user_id"),
    ("POST", "/api/v1/auth/login", {"username": 5}, "username"),
])
async def test_bad_input_answers_400_naming_the_field(api, admin, method, path, body, field):
    r = await api.request(method, path, json=body, headers=bearer(admin))
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]
