"""HTTP to the master with Determined's login habits.

A command asks for data; the session finds a token for that master (the token store, then
`DET_USER`+`DET_USER_TOKEN`), and if there is none or the master answers 401 it logs in the
way Determined's `login_with_cache` does: `-u USER` prompts for a password, else
`DET_USER`+`DET_PASS`, else `determined` with the empty password. Failures become CliError with
the master's own `message`, so no command ever shows a traceback for a 4xx or a dead master.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import requests

from controlplane.cli.auth_store import TokenStore
from controlplane.cli.errors import ApiError, CliError

DEFAULT_USER = "determined"
NOT_LOGGED_IN = "Not logged in: run `det user login`"
TIMEOUT = (10.0, 120.0)
STREAM_TIMEOUT = (10.0, None)
UPLOAD_TIMEOUT = (10.0, 900.0)
_UNSET: Any = object()


def error_message(resp: requests.Response) -> str:
    """Determined's lookup order: `message`, then `error.message`, then `error.error`, else text."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        if isinstance(body.get("message"), str) and body["message"]:
            return body["message"]
        err = body.get("error")
        if isinstance(err, dict):
            for key in ("message", "error"):
                if isinstance(err.get(key), str) and err[key]:
                    return err[key]
        elif isinstance(err, str) and err:
            return err
    text = (resp.text or "").strip()
    return text[:500] if text else f"HTTP {resp.status_code} {resp.reason or ''}".strip()


class Session:
    """One master, one user identity; tokens are fetched lazily and refreshed once on 401."""

    def __init__(self, master: str, user: str | None = None, store: TokenStore | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.master = master
        self.requested_user = user
        self.store = store or TokenStore()
        self.env = os.environ if env is None else env
        self.http = requests.Session()
        self.token: str | None = None
        self.username: str | None = None
        self._fresh = False  # the token came from a login in this process

    # ---- transport -------------------------------------------------------------------------
    def _send(self, method: str, path: str, *, params: Mapping[str, Any] | None, data: Any,
              headers: dict[str, str], timeout: Any, stream: bool) -> requests.Response:
        url = f"{self.master}/{path.lstrip('/')}"
        try:
            return self.http.request(method, url, params=params, data=data, headers=headers,
                                     timeout=timeout, stream=stream)
        except requests.exceptions.ConnectionError as e:
            raise CliError(f"cannot reach the master at {self.master}: {_reason(e)}") from None
        except requests.exceptions.Timeout:
            raise CliError(f"cannot reach the master at {self.master}: timed out") from None
        except requests.exceptions.RequestException as e:
            raise CliError(f"request to the master at {self.master} failed: {e}") from None

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                body: Any = _UNSET, data: Any = None, auth: bool = True, timeout: Any = TIMEOUT,
                stream: bool = False) -> requests.Response:
        """Send; on 401 with a cached token log in again and retry once; raise ApiError on ≥300."""
        if body is not _UNSET:
            data = json.dumps(body)
        for attempt in (0, 1):
            headers: dict[str, str] = {}
            if auth:
                headers["Authorization"] = f"Bearer {self.ensure_token()}"
            resp = self._send(method, path, params=params, data=data, headers=headers, timeout=timeout,
                              stream=stream)
            if resp.status_code == 401 and auth and attempt == 0 and not self._fresh:
                resp.close()
                self.store.drop(self.master, self.username)
                self.token = None
                continue
            if resp.status_code == 401 and auth:
                raise CliError(NOT_LOGGED_IN)
            if resp.status_code >= 300:
                raise ApiError(error_message(resp), resp.status_code)
            return resp
        raise CliError(NOT_LOGGED_IN)  # pragma: no cover - the loop always returns or raises

    def _json(self, resp: requests.Response) -> Any:
        if not resp.content:
            return {}
        try:
            return resp.json()
        except ValueError:
            raise CliError(f"the master at {self.master} sent a non-JSON answer: {resp.text[:200]!r}") from None

    def get(self, path: str, params: Mapping[str, Any] | None = None, *, auth: bool = True) -> Any:
        return self._json(self.request("GET", path, params=params, auth=auth))

    def post(self, path: str, body: Any = _UNSET, *, data: Any = None, timeout: Any = TIMEOUT,
             auth: bool = True) -> Any:
        return self._json(self.request("POST", path, body=body, data=data, timeout=timeout, auth=auth))

    def patch(self, path: str, body: Any = _UNSET) -> Any:
        return self._json(self.request("PATCH", path, body=body))

    def put(self, path: str, body: Any = _UNSET) -> Any:
        return self._json(self.request("PUT", path, body=body))

    def delete(self, path: str) -> Any:
        return self._json(self.request("DELETE", path))

    def stream_ndjson(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Yield each `result` of an NDJSON stream as it arrives; an `error` line raises."""
        resp = self.request("GET", path, params=params, stream=True, timeout=STREAM_TIMEOUT)
        try:
            for raw in resp.iter_lines(chunk_size=None):
                if not raw:
                    continue
                try:
                    line = json.loads(raw)
                except ValueError:
                    raise CliError(f"the master sent a malformed stream line: {raw[:200]!r}") from None
                if isinstance(line, dict) and line.get("error"):
                    err = line["error"]
                    msg = err.get("message") or err.get("error") if isinstance(err, dict) else str(err)
                    raise CliError(str(msg or err))
                if isinstance(line, dict) and isinstance(line.get("result"), dict):
                    yield line["result"]
        except requests.exceptions.RequestException as e:
            raise CliError(f"lost the connection to the master at {self.master}: {_reason(e)}") from None
        finally:
            resp.close()

    # ---- auth ------------------------------------------------------------------------------
    def ensure_token(self) -> str:
        if self.token:
            return self.token
        stored = self.store.get(self.master, self.requested_user)
        if stored:
            self.token, self.username, self._fresh = stored.token, stored.username, False
            return self.token
        env_user, env_token = self.env.get("DET_USER"), self.env.get("DET_USER_TOKEN")
        if env_user and env_token and self.requested_user in (None, env_user):
            self.token, self.username, self._fresh = env_token, env_user, True
            return self.token
        username, password = self._credentials()
        self.login(username, password)
        assert self.token is not None
        return self.token

    def _credentials(self) -> tuple[str, str]:
        env_user, env_pass = self.env.get("DET_USER"), self.env.get("DET_PASS")
        if self.requested_user is not None:
            if env_user == self.requested_user and env_pass is not None:
                return self.requested_user, env_pass
            return self.requested_user, prompt_password(f"Password for user '{self.requested_user}': ")
        if env_user and env_pass is not None:
            return env_user, env_pass
        return DEFAULT_USER, ""

    def login(self, username: str, password: str, *, explicit: bool = False) -> dict[str, Any]:
        """POST /api/v1/auth/login and remember the token; `explicit` is `det user login`."""
        resp = self._send("POST", "/api/v1/auth/login", params=None,
                          data=json.dumps({"username": username, "password": password, "isHashed": False}),
                          headers={}, timeout=TIMEOUT, stream=False)
        if resp.status_code in (401, 403):
            raise CliError("Invalid username/password" if explicit else NOT_LOGGED_IN)
        if resp.status_code >= 300:
            raise ApiError(error_message(resp), resp.status_code)
        body = self._json(resp)
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise CliError(f"the master at {self.master} answered the login without a token")
        # `det -u NAME` keeps NAME's login for later `-u NAME` commands but leaves the active one.
        self.store.put(self.master, username, token, activate=explicit or self.requested_user is None)
        self.token, self.username, self._fresh = token, username, True
        return body

    def current_username(self) -> str:
        self.ensure_token()
        return self.username or DEFAULT_USER


def prompt_password(prompt: str) -> str:
    try:
        return getpass.getpass(prompt)
    except (EOFError, KeyboardInterrupt):
        raise CliError("no password given") from None


def _reason(e: Exception) -> str:
    """The innermost useful text of a requests/urllib3 connection error."""
    text = str(e)
    for marker in ("Failed to establish a new connection: ", "NameResolutionError", "Connection refused"):
        if marker in text:
            tail = text.split(marker, 1)[1] if marker.endswith(": ") else marker
            return tail.rstrip("'\")]") or text
    return text

