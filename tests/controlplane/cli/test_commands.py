"""The commands against the fake master: requests sent, output printed, errors without tracebacks."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import stat
import threading
import time

import pytest

from controlplane.cli.auth_store import TokenStore


def stored(fake_master):
    return TokenStore().get(fake_master.url)


# ---- auth -----------------------------------------------------------------------------------
def test_auto_login_as_determined_and_token_reuse(fake_master, det):
    r = det("experiment", "list", "--json")
    assert r.rc == 0, r.err
    logins = fake_master.calls("POST", "/api/v1/auth/login")
    assert len(logins) == 1
    assert json.loads(logins[0].body) == {"username": "determined", "password": "", "isHashed": False}
    token = stored(fake_master)
    assert token.username == "determined"
    assert stat.S_IMODE(TokenStore().path.stat().st_mode) == 0o600
    det("experiment", "list")
    assert len(fake_master.calls("POST", "/api/v1/auth/login")) == 1  # the stored token was reused
    listing = fake_master.calls("GET", "/api/v1/experiments")[-1]
    assert listing.headers["Authorization"] == f"Bearer {token.token}"


def test_stale_token_is_replaced_after_401(fake_master, det):
    TokenStore().put(fake_master.url, "determined", "expired")
    r = det("experiment", "list")
    assert r.rc == 0, r.err
    assert stored(fake_master).token != "expired"
    assert len(fake_master.calls("POST", "/api/v1/auth/login")) == 1


def test_env_credentials(fake_master, det, monkeypatch):
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", "s3cret")
    assert det("user", "whoami").out.strip() == "You are logged in as user 'alice'"


def test_failed_auto_login_says_how_to_log_in(fake_master, det, monkeypatch):
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", "wrong")
    r = det("experiment", "list")
    assert r.rc == 1
    assert r.err.strip() == "Error: Not logged in: run `det user login`"


def test_user_login_prompts_and_stores(fake_master, det, monkeypatch):
    prompts = []
    monkeypatch.setattr("getpass.getpass", lambda p: prompts.append(p) or "s3cret")
    r = det("user", "login", "alice")
    assert r.rc == 0, r.err
    assert prompts == ["Password for user 'alice': "]
    assert stored(fake_master).username == "alice"
    assert "You are logged in as user 'alice'" in det("user", "whoami").out
    monkeypatch.setattr("getpass.getpass", lambda p: "nope")
    bad = det("user", "login", "alice")
    assert bad.rc == 1 and bad.err.strip() == "Error: Invalid username/password"


def test_dash_u_prompts_for_password(fake_master, det, monkeypatch):
    monkeypatch.setattr("getpass.getpass", lambda p: "s3cret")
    r = det("-u", "alice", "user", "whoami")
    assert r.out.strip() == "You are logged in as user 'alice'"


def test_logout_forgets_token(fake_master, det):
    det("experiment", "list")
    r = det("user", "logout")
    assert r.rc == 0 and "Logged out user 'determined'" in r.out
    assert stored(fake_master) is None
    assert fake_master.calls("POST", "/api/v1/auth/logout")
    assert "Not logged in" in det("user", "logout").out


def test_change_password_sends_client_hashes_of_the_old_and_new_password(fake_master, det, monkeypatch):
    answers = iter(["", "new-pass", "new-pass"])  # current (empty), new, confirm
    monkeypatch.setattr("getpass.getpass", lambda p: next(answers))
    r = det("user", "change-password")
    assert r.rc == 0, r.err
    call = fake_master.calls("POST", "/api/v1/users/2/password")[0]
    expected = hashlib.sha512(b"GubPEmmotfiK9TMD6Zdw" + b"new-pass").hexdigest()
    assert json.loads(call.body) == {"password": expected, "oldPassword": "", "isHashed": True}

    answers = iter(["a", "b"])
    r = det("user", "change-password", "alice")
    assert r.rc == 1 and "passwords do not match" in r.err


# ---- experiments ----------------------------------------------------------------------------
def test_experiment_list_table_and_json(fake_master, det):
    r = det("experiment", "list")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split("|")[0].strip() == "ID"
    assert [h.strip() for h in lines[0].split("|")] == ["ID", "Owner", "Name", "State", "Progress", "Start Time",
                                                        "End Time", "Resource Pool"]
    assert any(line.split("|")[0].strip() == "2" and "ACTIVE" in line and "50.0%" in line for line in lines)
    call = fake_master.calls("GET", "/api/v1/experiments")[-1]
    assert call.query["users"] == ["determined"] and call.query["archived"] == ["false"]
    data = json.loads(det("e", "ls", "--all", "--json").out)
    assert [e["id"] for e in data] == [1, 2]
    assert "users" not in fake_master.calls("GET", "/api/v1/experiments")[-1].query


def test_experiment_describe_json(fake_master, det):
    r = det("experiment", "describe", "1", "--json")
    assert r.rc == 0, r.err
    data = json.loads(r.out)
    assert data["experiment"]["id"] == 1 and data["experiment"]["state"] == "STATE_COMPLETED"
    (t,) = data["trials"]
    assert t["id"] == 10
    assert [m["stepsCompleted"] for m in t["metrics"]["validation"]] == [100, 200, 300, 400]
    assert t["metrics"]["training"] and t["checkpoints"][0]["uuid"] == "ckpt-uuid-1"
    groups = sorted(c.query["group"][0] for c in fake_master.calls("GET", "/api/v1/trials/10/metrics"))
    assert groups == ["training", "validation"]


def test_experiment_describe_text_and_metrics(fake_master, det):
    r = det("experiment", "describe", "1", "--metrics")
    assert r.rc == 0, r.err
    assert "COMPLETED" in r.out and "Trial ID" in r.out and "Best validation (loss)" in r.out
    assert "ckpt-uuid-1" in r.out and "0.25" in r.out
    assert "█▄▃▁" in r.out


def test_missing_experiment_is_an_error_without_traceback(fake_master, det):
    r = det("experiment", "describe", "99")
    assert r.rc == 1
    assert r.err.strip() == "Error: experiment 99 not found"
    assert "Traceback" not in r.err


def test_bad_id_is_a_usage_error(fake_master, det):
    r = det("experiment", "describe", "abc")
    assert r.rc == 2 and "numeric id" in r.err


def test_unreachable_master(cli_env, det):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = det("-m", f"127.0.0.1:{port}", "experiment", "list")
    assert r.rc == 1
    assert r.err.startswith(f"Error: cannot reach the master at http://127.0.0.1:{port}: ")
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("verb,state,word", [("pause", "STATE_PAUSED", "Paused"),
                                              ("activate", "STATE_ACTIVE", "Activated"),
                                              ("kill", "STATE_CANCELED", "Killed")])
def test_state_changes_send_no_body(fake_master, det, verb, state, word):
    r = det("experiment", verb, "2")
    assert r.rc == 0, r.err
    assert r.out.strip() == f"{word} experiment 2"
    assert fake_master.state.experiments[2]["state"] == state
    assert fake_master.calls("POST", f"/api/v1/experiments/2/{verb}")[0].body == b""


def test_wait_prints_state_changes_and_exit_code(fake_master, det):
    fake_master.state.states_on_poll = ["STATE_ACTIVE", "STATE_ACTIVE", "STATE_COMPLETED"]
    r = det("experiment", "wait", "2", "--interval", "0.01")
    assert r.rc == 0
    assert r.out.splitlines() == ["Experiment 2: ACTIVE", "Experiment 2: COMPLETED"]
    fake_master.state.states_on_poll = ["STATE_ERROR"]
    assert det("experiment", "wait", "2", "--interval", "0.01").rc == 1


def test_experiment_config_prints_yaml(fake_master, det):
    r = det("experiment", "config", "1")
    assert r.rc == 0 and "searcher:" in r.out and "metric: loss" in r.out


def write_experiment(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "__pycache__").mkdir(parents=True)
    (ctx / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (ctx / "train.py").write_text("print('train')\n")
    (ctx / "secret.txt").write_text("no")
    (ctx / ".detignore").write_text("secret.txt\n")
    config = tmp_path / "exp.yaml"
    config.write_text("# my experiment\nname: test\nentrypoint: python3 train.py\n"
                      "hyperparameters:\n  lr: 0.1\n"
                      "searcher:\n  name: single\n  metric: loss\n  smaller_is_better: true\n"
                      "  max_length:\n    batches: 100\n")
    return config, ctx


def test_experiment_create_uploads_context(fake_master, det, config_modules, tmp_path):
    config, ctx = write_experiment(tmp_path)
    r = det("experiment", "create", str(config), str(ctx))
    assert r.rc == 0, r.err
    assert r.out.strip() == "Created experiment 3"
    call = fake_master.calls("POST", "/api/v1/experiments")[0]
    assert int(call.headers["Content-Length"]) == len(call.body)
    body = json.loads(call.body)
    assert body["config"] == config.read_text()  # sent as written, comments included
    assert body["activate"] is True and body["parentId"] is None and body["projectId"] is None
    files = {f["path"]: f for f in body["modelDefinition"]}
    assert set(files) == {"train.py"}
    assert base64.b64decode(files["train.py"]["content"]) == b"print('train')\n"


def test_experiment_create_paused_overrides_json(fake_master, det, config_modules, tmp_path):
    config, ctx = write_experiment(tmp_path)
    r = det("e", "create", str(config), str(ctx), "--paused", "--json", "--config", "searcher.max_length.batches=7")
    assert r.rc == 0, r.err
    assert json.loads(r.out)["id"] == 3
    body = json.loads(fake_master.calls("POST", "/api/v1/experiments")[0].body)
    assert body["activate"] is False
    import yaml

    assert yaml.safe_load(body["config"])["searcher"]["max_length"]["batches"] == 7


def test_experiment_create_invalid_config(fake_master, det, config_modules, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\nentrypoint: python3 train.py\nsearcher:\n  name: no-such-searcher\n"
                      "  metric: loss\n  max_length:\n    batches: 1\n")
    r = det("experiment", "create", str(config), str(tmp_path))
    assert r.rc == 1
    assert r.err.startswith("Error: invalid experiment config: ")
    if not config_modules:
        assert "searcher.name" in r.err
    assert not fake_master.calls("POST", "/api/v1/experiments")


def test_experiment_create_missing_config_file(fake_master, det, config_modules, tmp_path):
    r = det("experiment", "create", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert r.rc == 1 and r.err.startswith("Error: cannot read experiment config")


def test_experiment_create_follow_first_trial(fake_master, det, config_modules, tmp_path):
    config, ctx = write_experiment(tmp_path)
    fake_master.state.logs[30] = ["hello from trial 30\n"]
    orig = fake_master.state

    done = threading.Event()

    def finish():
        """The experiment completes once it exists (however slowly a loaded machine creates it)."""
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            exp = orig.experiments.get(3)
            if exp:
                exp["state"] = "STATE_COMPLETED"
                return
            time.sleep(0.05)

    finisher = threading.Thread(target=finish, daemon=True)
    finisher.start()
    r = det("experiment", "create", str(config), str(ctx), "-f")
    done.set()
    finisher.join()
    assert r.rc == 0, r.err
    assert "Created experiment 3" in r.out and "hello from trial 30" in r.out
    assert fake_master.calls("GET", "/api/v1/trials/30/logs")[0].query["follow"] == ["true"]


# ---- trials and logs ------------------------------------------------------------------------
def test_trial_logs_streams_ndjson(fake_master, det):
    r = det("trial", "logs", "10")
    assert r.rc == 0, r.err
    assert r.out == "".join(f"[t] || line {i}\n" for i in range(5))
    assert fake_master.calls("GET", "/api/v1/trials/10/logs")[0].query["follow"] == ["false"]


def test_trial_logs_follow_is_live(fake_master, det):
    fake_master.state.log_delay_s = 0.05
    r = det("trial", "logs", "10", "-f")
    assert r.out.count("\n") == 5
    assert fake_master.calls("GET", "/api/v1/trials/10/logs")[0].query["follow"] == ["true"]


def test_trial_logs_head_and_tail(fake_master, det):
    assert det("trial", "logs", "10", "--head", "2").out == "[t] || line 0\n[t] || line 1\n"
    tail = det("trial", "logs", "10", "--tail", "2")
    assert tail.out == "[t] || line 3\n[t] || line 4\n"
    q = fake_master.calls("GET", "/api/v1/trials/10/logs")[-1].query
    assert q["limit"] == ["2"] and q["orderBy"] == ["ORDER_BY_DESC"]
    both = det("trial", "logs", "10", "--head", "1", "--tail", "1")
    assert both.rc == 2


def test_trial_logs_tail_then_follow_skips_shown_lines(fake_master, det):
    r = det("trial", "logs", "10", "--tail", "2", "-f")
    assert r.out == "[t] || line 3\n[t] || line 4\n"


def test_experiment_logs_uses_first_trial(fake_master, det):
    r = det("experiment", "logs", "1", "--tail", "1")
    assert r.out == "[t] || line 4\n"


def test_trial_logs_missing_trial(fake_master, det):
    r = det("trial", "logs", "77")
    assert r.rc == 1 and r.err.strip() == "Error: trial 77 not found"


def test_trial_describe(fake_master, det):
    data = json.loads(det("trial", "describe", "10", "--json").out)
    assert data["id"] == 10 and data["checkpoints"] and len(data["metrics"]["validation"]) == 4
    r = det("trial", "describe", "10")
    assert r.rc == 0, r.err
    assert "Validation metrics:" in r.out and "ckpt-uuid-1" in r.out and "2.0 KiB" in r.out


# ---- agents and slots -----------------------------------------------------------------------
def test_agent_and_slot_list(fake_master, det):
    agents = json.loads(det("agent", "list", "--json").out)
    assert [a["id"] for a in agents] == ["local-agent-0"]
    text = det("agent", "list").out
    assert "local-agent-0" in text and "Agent ID" in text
    header, _, row = text.splitlines()[:3]
    assert header.split("|")[-1].strip() == "Instance Type" and row.split("|")[-1].strip() == "g5.xlarge"
    slots = json.loads(det("slot", "list", "--json").out)
    assert [(s["slotId"], s["allocationId"]) for s in slots] == [("0", None), ("1", "alloc-1")]
    text = det("slot", "list").out
    assert "FREE" in text and "alloc-1" in text


def test_no_group_prints_help(cli_env, det):
    r = det()
    assert r.rc == 2 and "usage: det" in r.err
