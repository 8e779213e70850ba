import stat

from controlplane.cli.auth_store import TokenStore, store_path


def test_store_path_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert store_path() == tmp_path / "cfg" / "controlplane" / "auth.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store_path() == tmp_path / "home" / ".config" / "controlplane" / "auth.json"


def test_put_get_drop_and_file_modes(tmp_path):
    store = TokenStore(tmp_path / "cfg" / "controlplane" / "auth.json")
    assert store.get("http://m:8080") is None
    store.put("http://m:8080", "alice", "t1")
    store.put("http://n:8080", "bob", "t2")
    assert store.get("http://m:8080").token == "t1"
    assert store.get("http://n:8080").username == "bob"
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert store.drop("http://m:8080").token == "t1"
    assert store.get("http://m:8080") is None
    assert store.get("http://n:8080").token == "t2"
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert list(store.path.parent.iterdir()) == [store.path]  # no temp files left


def test_corrupt_store_reads_as_empty(tmp_path):
    path = tmp_path / "auth.json"
    path.write_text("{not json")
    store = TokenStore(path)
    assert store.get("http://m:8080") is None
    store.put("http://m:8080", "u", "t")
    assert store.get("http://m:8080").token == "t"


def test_each_users_login_is_kept_and_only_an_activated_one_is_used_by_default(tmp_path):
    store = TokenStore(tmp_path / "auth.json")
    m = "http://m:8080"
    store.put(m, "admin", "ta", activate=False)  # `det -u admin ...` before any login
    assert store.get(m) is None and store.get(m, "admin").token == "ta"
    store.put(m, "alice", "t1")  # `det user login alice`
    store.put(m, "admin", "ta2", activate=False)
    assert store.get(m).username == "alice" and store.get(m, "admin").token == "ta2"
    assert store.drop(m, "admin").token == "ta2"
    assert store.get(m).token == "t1"
    assert store.drop(m).username == "alice" and store.get(m) is None


def test_a_store_written_before_logins_were_kept_per_user_reads_as_its_active_login(tmp_path):
    path = tmp_path / "auth.json"
    path.write_text('{"http://m:8080": {"username": "bob", "token": "tb"}}')
    store = TokenStore(path)
    assert store.get("http://m:8080") == store.get("http://m:8080", "bob") and store.get("http://m:8080").token == "tb"
    store.put("http://m:8080", "carol", "tc", activate=False)
    assert store.get("http://m:8080").username == "bob"
