"""`det model ...` against the fake master: requests sent, tables, --json, errors."""

from __future__ import annotations

import json

from tests.controlplane.cli.test_job_commands import header, table_rows


def bodies(fake_master, method: str, path: str) -> list[dict]:
    return [json.loads(r.body) if r.body else {} for r in fake_master.calls(method, path)]


def test_create_sends_determined_body_and_prints_the_model(fake_master, det):
    r = det("model", "create", "spirals", "the spirals net")
    assert r.rc == 0, r.err
    assert bodies(fake_master, "POST", "/api/v1/models") == [{
        "name": "spirals", "description": "the spirals net", "labels": None, "metadata": None, "notes": None,
        "workspaceName": None}]
    assert header(r.out) == ["ID", "Name", "Description", "Versions", "Labels", "Owner", "Creation Time",
                             "Last Updated Time", "Metadata"]
    assert table_rows(r.out) == [["1", "spirals", "the spirals net", "0", "", "determined",
                                  "2025-03-20 12:00:00+0000", "2025-03-20 12:00:00+0000", "{}"]]

    r = det("m", "create", "other", "--description", "d", "--metadata", '{"team": "cv"}', "--labels", "a,b",
            "--notes", "n", "--json")
    assert r.rc == 0, r.err
    model = json.loads(r.out)
    assert (model["name"], model["description"], model["metadata"], model["labels"], model["notes"]) == \
        ("other", "d", {"team": "cv"}, ["a", "b"], "n")


def test_create_errors(fake_master, det):
    assert det("model", "create", "dup").rc == 0
    r = det("model", "create", "dup")
    assert r.rc == 1 and r.err.strip() == "Error: name: a model named 'dup' already exists"
    r = det("model", "create", "x", "--metadata", "[1]")
    assert r.rc == 2 and "must be a JSON object" in r.err
    r = det("model", "create", "x", "desc", "--description", "again")
    assert r.rc == 1 and "give the description once" in r.err
    assert len(fake_master.calls("POST", "/api/v1/models")) == 2  # nothing sent for the bad ones


def test_register_versions_and_list_them(fake_master, det):
    assert det("model", "create", "spirals").rc == 0
    r = det("model", "register-version", "spirals", "ckpt-uuid-1")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == "Registered checkpoint ckpt-uuid-1 as version 1 of model spirals"
    assert bodies(fake_master, "POST", "/api/v1/models/spirals/versions") == [{"checkpointUuid": "ckpt-uuid-1"}]
    r = det("model", "register-version", "spirals", "ckpt-uuid-2", "--name", "v-two", "--comment", "c",
            "--metadata", '{"k": 1}', "--json")
    assert r.rc == 0, r.err
    answer = json.loads(r.out)
    assert answer["modelVersion"]["version"] == 2 and answer["modelVersion"]["checkpoint"]["uuid"] == "ckpt-uuid-2"
    assert bodies(fake_master, "POST", "/api/v1/models/spirals/versions")[1] == {
        "checkpointUuid": "ckpt-uuid-2", "name": "v-two", "comment": "c", "metadata": {"k": 1}}

    r = det("model", "list-versions", "spirals")
    assert r.rc == 0, r.err
    model_table, version_table = r.out.split("\n\n")
    assert table_rows(model_table)[0][:4] == ["1", "spirals", "", "2"]
    assert header(version_table) == ["Version #", "Name", "Experiment ID", "Trial ID", "Batch #", "Checkpoint UUID",
                                     "Validation Metrics", "Registered"]
    assert table_rows(version_table) == [
        ["1", "", "1", "10", "300", "ckpt-uuid-1", "loss=0.25", "2025-03-20 12:00:00+0000"],
        ["2", "v-two", "2", "20", "100", "ckpt-uuid-2", "loss=0.5", "2025-03-20 12:00:00+0000"]]
    r = det("model", "list-versions", "1", "--json")  # by id, the master's whole answer
    answer = json.loads(r.out)
    assert answer["model"]["name"] == "spirals" and [v["version"] for v in answer["modelVersions"]] == [1, 2]
    assert answer["pagination"]["total"] == 2


def test_register_version_errors_name_the_checkpoint(fake_master, det):
    assert det("model", "create", "m").rc == 0
    r = det("model", "register-version", "m", "no-such-uuid")
    assert r.rc == 1 and r.err.strip() == "Error: checkpointUuid: checkpoint no-such-uuid not found"
    r = det("model", "register-version", "m", "ckpt-active")
    assert r.rc == 1 and "only a STATE_COMPLETED checkpoint" in r.err
    r = det("model", "register-version", "nope", "ckpt-uuid-1")
    assert r.rc == 1 and r.err.strip() == "Error: model 'nope' not found"


def test_describe_shows_the_latest_or_the_given_version(fake_master, det):
    assert det("model", "create", "my model").rc == 0
    for uuid in ("ckpt-uuid-1", "ckpt-uuid-2"):
        assert det("model", "register-version", "my model", uuid).rc == 0
    r = det("model", "describe", "my model")
    assert r.rc == 0, r.err
    assert fake_master.calls("GET", "/api/v1/models/my%20model")  # the name is quoted in the path
    latest = fake_master.calls("GET", "/api/v1/models/1/versions")[-1]
    assert latest.query == {"limit": ["1"], "sortBy": ["SORT_BY_VERSION"], "orderBy": ["ORDER_BY_DESC"]}
    assert [row[0] for row in table_rows(r.out.split("\n\n")[1])] == ["2"]
    r = det("model", "describe", "my model", "--version", "1")
    assert [row[5] for row in table_rows(r.out.split("\n\n")[1])] == ["ckpt-uuid-1"]
    r = det("model", "describe", "my model", "--json")
    assert json.loads(r.out)["name"] == "my model" and json.loads(r.out)["numVersions"] == 2
    r = det("model", "describe", "my model", "--version", "9")
    assert r.rc == 1 and "has no version 9" in r.err
    assert det("model", "describe", "x", "--version", "0").rc == 2


def test_list_pages_sorts_and_prints_json(fake_master, det):
    for name in ("b", "a", "c"):
        assert det("model", "create", name).rc == 0
    fake_master.state.registry.page_cap = 2
    r = det("model", "list", "--sort-by", "name", "--json")
    assert r.rc == 0, r.err
    assert [m["name"] for m in json.loads(r.out)] == ["a", "b", "c"]
    calls = fake_master.calls("GET", "/api/v1/models")
    assert [c.query["offset"] for c in calls] == [["0"], ["2"]]
    assert calls[0].query["sortBy"] == ["SORT_BY_NAME"] and calls[0].query["orderBy"] == ["ORDER_BY_ASC"]
    r = det("model", "ls", "--sort-by", "name", "--order-by", "desc")
    assert [row[1] for row in table_rows(r.out)] == ["c", "b", "a"]


def test_update_and_delete(fake_master, det):
    assert det("model", "create", "m").rc == 0
    assert det("model", "register-version", "m", "ckpt-uuid-1").rc == 0
    r = det("model", "update", "m", "--description", "new", "--metadata", '{"a": 1}', "--json")
    assert r.rc == 0, r.err
    assert bodies(fake_master, "PATCH", "/api/v1/models/m") == [{"description": "new", "metadata": {"a": 1}}]
    assert json.loads(r.out)["description"] == "new"
    r = det("model", "update", "m")
    assert r.rc == 1 and "nothing to update" in r.err
    r = det("model", "update", "m", "--name", "renamed", "--notes", "see wiki")
    assert r.rc == 0 and "Notes:\nsee wiki" in r.out
    r = det("model", "delete-version", "renamed", "1")
    assert r.rc == 0 and r.out.strip() == "Deleted version 1 of model renamed"
    assert det("model", "delete", "renamed").out.strip() == "Deleted model renamed"
    assert [c.path for c in fake_master.calls("DELETE")] == ["/api/v1/models/renamed/versions/1",
                                                             "/api/v1/models/renamed"]
    r = det("model", "describe", "renamed")
    assert r.rc == 1 and r.err.strip() == "Error: model 'renamed' not found"
