"""`det template ...` and `det experiment create --template` against the real master app."""

from __future__ import annotations

import json
import re
import sqlite3

import requests
import yaml

TEMPLATE_YAML = """\
# shared by the team's experiments
entrypoint: python3 train.py
max_restarts: 4
searcher:
  name: single
  metric: loss
  max_length:
    batches: 10
checkpoint_storage:
  type: s3
  bucket: team-bucket
  secret_key: sk-team   # never shown back
"""
PARTIAL_CONFIG = """\
name: from-template
max_restarts: 1
hyperparameters:
  lr: 0.1
"""


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in out.rstrip("\n").splitlines()[2:]]


def header(out: str) -> list[str]:
    return [c.strip() for c in out.splitlines()[0].split("|")]


def stored_templates(real_master) -> dict[str, dict]:
    """What the database holds (secrets included), read beside the master."""
    db = sqlite3.connect(real_master.app.state.runtime.settings.resolved_db_url().split("///", 1)[1])
    try:
        return {name: json.loads(config) for name, config in db.execute("SELECT name, config FROM templates")}
    finally:
        db.close()


def test_set_list_describe_and_remove(real_master, det, tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEMPLATE_YAML)
    r = det("template", "set", "team", str(path))
    assert (r.rc, r.out) == (0, "Set template team\n"), r.err

    r = det("tpl", "ls")
    assert r.rc == 0 and header(r.out) == ["Name", "Owner"] and table_rows(r.out) == [["team", "determined"]]
    r = det("template", "list", "--details")
    assert header(r.out) == ["Name", "Owner", "Config"] and "entrypoint: python3 train.py" in r.out
    assert "sk-team" not in r.out and "********" in r.out
    listed = json.loads(det("template", "list", "--json").out)
    assert [(t["name"], t["workspaceId"]) for t in listed] == [("team", 1)]

    r = det("template", "describe", "team")
    shown = yaml.safe_load(r.out)
    assert shown["checkpoint_storage"] == {"type": "s3", "bucket": "team-bucket", "secret_key": "********"}
    assert shown["searcher"]["metric"] == "loss" and "sk-team" not in r.out
    assert json.loads(det("template", "describe", "team", "--json").out)["config"] == shown

    path.write_text("max_restarts: 9\n")
    assert det("template", "set", "team", str(path)).rc == 0
    assert yaml.safe_load(det("template", "describe", "team").out) == {"max_restarts": 9}
    r = det("template", "create", "team", str(path))
    assert (r.rc, r.err) == (1, "Error: name: a template named 'team' already exists\n")
    assert det("template", "create", "other", str(path)).out == "Created template other\n"

    r = det("template", "rm", "team")
    assert (r.rc, r.out) == (0, "Removed template team\n")
    r = det("template", "describe", "team")
    assert (r.rc, r.err) == (1, "Error: template 'team' not found\n")
    assert table_rows(det("template", "list").out) == [["other", "determined"]]


def test_describe_edit_set_keeps_the_secrets_it_masked(real_master, det, tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEMPLATE_YAML)
    assert det("template", "set", "team", str(path)).rc == 0
    described = det("template", "describe", "team").out
    path.write_text(described.replace("max_restarts: 4", "max_restarts: 5"))
    assert det("template", "set", "team", str(path)).rc == 0
    stored = stored_templates(real_master)["team"]
    assert stored["max_restarts"] == 5 and stored["checkpoint_storage"]["secret_key"] == "sk-team"


def test_experiment_create_merges_the_template_under_the_config(real_master, det, tmp_path):
    real_master.app.state.runtime.settings.checkpoint_storage_choices = [  # the admin's place the template names
        {"name": "tmp", "type": "shared_fs", "host_path": "/tmp"}]
    (tmp_path / "team.yaml").write_text(TEMPLATE_YAML.replace("type: s3", "type: shared_fs\n  host_path: /tmp")
                                        .replace("  bucket: team-bucket\n  secret_key: sk-team   # never shown back\n",
                                                 ""))
    assert det("template", "set", "team", str(tmp_path / "team.yaml")).rc == 0
    config = tmp_path / "exp.yaml"
    config.write_text(PARTIAL_CONFIG)
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text("print('hi')\n")

    r = det("experiment", "create", str(config), str(context))  # alone it lacks an entrypoint
    assert r.rc == 1 and "entrypoint" in r.err
    r = det("experiment", "create", str(config), str(context), "--template", "team")
    assert r.rc == 0, r.err
    exp_id = re.fullmatch(r"Created experiment (\d+)\n", r.out).group(1)
    merged = yaml.safe_load(det("experiment", "config", exp_id).out)
    assert merged["entrypoint"] == "python3 train.py" and merged["searcher"]["metric"] == "loss"
    assert merged["max_restarts"] == 1  # the config wins
    assert merged["checkpoint_storage"]["host_path"] == "/tmp"

    r = det("experiment", "create", str(config), str(context), "--template", "nope")
    assert (r.rc, r.err) == (1, "Error: template: no template named 'nope' (see det template list)\n")
    r = det("experiment", "create", str(config), "--local", "--test-mode", "--template", "team")
    assert r.rc == 1 and "--template do not apply to --local --test-mode" in r.err


def test_bad_files_and_other_peoples_templates(real_master, det, tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("entrypoint: [unclosed\n")
    r = det("template", "set", "team", str(bad))
    assert r.rc == 1 and r.err.startswith("Error: invalid template file:") and "line" in r.err
    bad.write_text("- a list\n")
    assert "the top level must be a mapping" in det("template", "set", "team", str(bad)).err
    r = det("template", "set", "team", str(tmp_path / "missing.yaml"))
    assert r.rc == 1 and r.err.startswith("Error: cannot read template file")
    assert det("template", "list", "--json").out == "[]\n"  # nothing was sent

    good = tmp_path / "good.yaml"
    good.write_text("max_restarts: 2\n")
    assert det("template", "set", "team", str(good)).rc == 0
    real_master.add_user("vera", "viewer")
    real_master.add_user("nora", "user")
    monkeypatch.setenv("DET_PASS", "pw")  # with DET_USER, `-u NAME` signs in without a prompt
    monkeypatch.setenv("DET_USER", "vera")
    assert table_rows(det("-u", "vera", "template", "list").out) == [["team", "determined"]]
    r = det("-u", "vera", "template", "set", "mine", str(good))
    assert (r.rc, r.err) == (1, "Error: role viewer may not edit\n")

    monkeypatch.setenv("DET_USER", "nora")
    r = det("-u", "nora", "template", "rm", "team")
    assert (r.rc, r.err) == (1, "Error: only the owner of template 'team' or an admin may edit it\n")
    assert det("-u", "nora", "template", "set", "noras", str(good)).rc == 0
    assert table_rows(det("template", "list").out) == [["noras", "nora"], ["team", "determined"]]


def test_list_reads_every_page(real_master, det):
    headers = real_master.login("determined")
    with requests.Session() as http:
        for i in range(205):  # the CLI asks 200 a page
            r = http.put(f"{real_master.url}/api/v1/templates/t{i:03d}", headers=headers,
                         json={"config": {"max_restarts": i}}, timeout=10)
            assert r.status_code == 200, r.text
    names = [row[0] for row in table_rows(det("template", "list").out)]
    assert names == [f"t{i:03d}" for i in range(205)]
