"""Hostile experiment creates: each is refused with a 4xx naming the field or entry, stores nothing,
and never holds the event loop (``/info`` answers while a create is being validated)."""

from __future__ import annotations

import asyncio
import base64
import threading
import tracemalloc

import pytest
import yaml

import controlplane.master.services.context as context_service
import controlplane.master.services.experiments as experiments_service
from tests.controlplane.config.test_config_limits import ALIAS_BOMB
from tests.controlplane.master.conftest import CONFIG

B64 = base64.b64encode(b"print('hi')\n").decode()


def _file(path: str, kind: int = 48, content: str = B64) -> dict:
    return {"path": path, "type": kind, "content": content, "mode": 0o644, "mtime": "0", "uid": 0, "gid": 0}


async def _create(api, config, files=None, **extra):
    body = {"config": config if isinstance(config, (str, dict)) else yaml.safe_dump(config),
            "modelDefinition": [_file("train.py")] if files is None else files, **extra}
    return await api.post("/api/v1/experiments", json=body)


async def _nothing_stored(api) -> bool:
    return (await api.get("/api/v1/experiments")).json()["experiments"] == []


async def _refused(api, status: int, *needles: str, **kwargs) -> None:
    r = await _create(api, **kwargs)
    assert r.status_code == status, r.text
    for needle in needles:
        assert needle in r.json()["message"], r.json()["message"]
    assert await _nothing_stored(api)


async def test_ten_million_point_grid_is_refused_with_its_size_without_building_it(api):
    grid = {**CONFIG, "searcher": {**CONFIG["searcher"], "name": "grid"},
            "hyperparameters": {f"h{i}": {"type": "int", "minval": 0, "maxval": 9, "count": 10} for i in range(7)}}
    tracemalloc.start()
    try:
        await _refused(api, 400, "hyperparameters", "10000000 points", "limit of 2000", config=grid)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 1024 * 1024


async def test_alias_bomb_is_refused(api):
    await _refused(api, 400, "YAML aliases expanded", config=ALIAS_BOMB.replace(
        "entrypoint: python3 train.py", "entrypoint: python3 train.py\nmax_restarts: 0"))


@pytest.mark.parametrize("shape", ["yaml-flow", "yaml-block", "json-shallow-for-msgspec", "json-10000"])
async def test_deep_configs_are_400_not_500(api, shape):
    if shape == "yaml-flow":
        config = yaml.safe_dump(CONFIG) + "data: " + "[" * 10_000 + "]" * 10_000 + "\n"
    elif shape == "yaml-block":
        config = yaml.safe_dump(CONFIG) + "data:\n" + "".join(" " * i + "-\n" for i in range(1, 300))
    else:
        deep: list = []
        node = deep
        for _ in range(500 if shape == "json-shallow-for-msgspec" else 10_000):
            node.append([])
            node = node[0]
        config = {**CONFIG, "data": deep}
        if shape == "json-10000":  # the JSON encoder recurses too: send the text as written
            import json

            text = json.dumps({**CONFIG, "data": 0}).replace('"data": 0', '"data": ' + "[" * 10_000 + "]" * 10_000)
            r = await api.post("/api/v1/experiments", content='{"config": ' + text + ', "modelDefinition": []}')
            assert r.status_code == 400, r.text
            assert "nested too deeply" in r.json()["message"]
            assert await _nothing_stored(api)
            return
    await _refused(api, 400, "nested more than 64 levels deep", config=config)


async def test_integer_beyond_64_bits_is_400_naming_the_field(api):
    text = yaml.safe_dump(CONFIG).replace("max_restarts: 1", "max_restarts: 1180591620717411303424")
    await _refused(api, 400, "max_restarts", "64 bits", config=text)
    await _refused(api, 400, "data.seed", "64 bits", config={**CONFIG, "data": {"seed": 2**70}})


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
async def test_non_finite_weight_is_400(api, value):
    await _refused(api, 400, "resources.weight", "finite",
                   config=yaml.safe_dump(CONFIG) + f"resources: {{weight: {value}}}\n")


async def test_a_config_that_used_to_fail_at_activate_is_refused_at_create(api):
    """Created paused, the old master stored it; activating it then answered 500 (10.0**400 overflows)."""
    config = {**CONFIG, "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -3, "maxval": 400}}}
    await _refused(api, 400, "hyperparameters.lr.maxval", "not a finite number", config=config, activate=False)


async def test_a_searcher_that_would_start_unbounded_trials_is_refused(api):
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1_000_000, "max_concurrent_trials": 0}}
    await _refused(api, 400, "searcher.max_concurrent_trials", "1000000 trials at once", config=config)


async def test_max_slots_below_the_gang_size_is_refused(api):
    config = {**CONFIG, "resources": {"slots_per_trial": 4, "max_slots": 2}}
    await _refused(api, 400, "resources.max_slots", "fewer than slots_per_trial", config=config)


async def test_paused_experiment_activates_after_create(api):
    r = await _create(api, CONFIG, activate=False)
    assert r.status_code == 200, r.text
    exp_id = r.json()["experiment"]["id"]
    assert (await api.post(f"/api/v1/experiments/{exp_id}/activate")).status_code == 200
    assert len((await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]) == 2


async def test_two_hundred_thousand_entries_are_refused_with_the_count(api):
    files = [{"path": f"d{i}", "type": 53, "content": ""} for i in range(200_000)]
    await _refused(api, 400, "200000 entries", "limit of 100000", config=CONFIG, files=files)


async def test_entries_count_toward_the_budget(api, monkeypatch):
    monkeypatch.setattr(context_service, "MAX_CONTEXT_BYTES", 10_000)
    files = [{"path": f"d{i}", "type": 53, "content": ""} for i in range(30)]  # 0 bytes of content
    await _refused(api, 413, "larger than 10000 bytes", "512 bytes", config=CONFIG, files=files)


BAD = [
    ([_file("C:evil")], "C:evil", "drive name"),
    ([_file("a\\b.py")], "a\\\\b.py", "backslash"),
    ([_file(".")], "'.'", "'.' component"),
    ([_file("a/./b")], "a/./b", "'.' component"),
    ([_file("../x")], "../x", "escapes the context"),
    ([_file("/abs")], "/abs", "absolute path"),
    ([_file("")], "modelDefinition[0].path", "non-empty string"),
    ([_file("a\x00b")], "modelDefinition[0].path", "NUL"),
    ([_file("x"), _file("x/y")], "'x'", "needs it to be a directory"),
    ([_file("x"), _file("x")], "'x'", "appears twice"),
    ([_file("n" * 256)], "n" * 256, "over 255 bytes"),
    ([_file("/".join(["d" * 200] * 21))], "modelDefinition[0].path", "4096"),
    ([_file("l", 50, base64.b64encode(b"../../etc").decode())], "'l'", "outside the context"),
    ([_file("l", 50, base64.b64encode(b"/etc/passwd").decode())], "'l'", "absolute path"),
    ([_file("h", 49)], "modelDefinition[0].type", "only regular files"),
]


@pytest.mark.parametrize(("files", "named", "rule"), BAD, ids=[b[2] + "-" + str(i) for i, b in enumerate(BAD)])
async def test_names_the_agent_cannot_create_are_refused_naming_them(api, files, named, rule):
    await _refused(api, 400, named, rule, config=CONFIG, files=files)


async def test_links_inside_the_context_are_kept(api):
    files = [_file("train.py"), _file("lib", 53), _file("lib/util.py"),
             _file("lib/train_link.py", 50, base64.b64encode(b"../train.py").decode())]
    r = await _create(api, CONFIG, files=files)
    assert r.status_code == 200, r.text
    import io
    import tarfile

    blob = base64.b64decode((await api.get(f"/api/v1/experiments/{r.json()['experiment']['id']}/model_def"))
                            .json()["b64Tgz"])
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        link = tar.getmember("lib/train_link.py")
    assert link.issym() and link.linkname == "../train.py"


async def test_info_answers_while_a_create_is_being_validated(api, monkeypatch):
    """The create's parsing runs in a worker thread: it waits there until /info has answered.
    Were it on the event loop, /info could not answer and the wait would give up (and the test fail)."""
    info_answered = threading.Event()
    seen: dict = {}
    real_prepare = experiments_service.prepare

    def slow_prepare(*args):
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        seen["info_first"] = info_answered.wait(timeout=20)
        return real_prepare(*args)

    monkeypatch.setattr(experiments_service, "prepare", slow_prepare)
    big = {**CONFIG, "description": "x" * 900_000}  # a large config, under the 1 MiB cap
    create = asyncio.create_task(_create(api, big, files=[_file(f"f{i}.py") for i in range(5000)]))
    while "thread" not in seen:
        await asyncio.sleep(0.01)
    info = await asyncio.wait_for(api.get("/info"), timeout=20)
    assert info.status_code == 200
    info_answered.set()
    r = await asyncio.wait_for(create, timeout=60)
    assert r.status_code == 200, r.text
    assert seen == {"thread": True, "info_first": True}


async def test_an_experiments_preemption_timeout_may_only_shorten_its_pools(api):
    """A user's experiment cannot keep the pool's slots longer than the admin allows work that must
    give way: over the pool's timeout (else the master's) is a 400 at create, fork, continue and in
    a template."""
    import dataclasses

    from controlplane.master.services.templates import checked_config

    over = {**CONFIG, "preemption_timeout": 2**31 - 1}
    r = await _create(api, over)  # the fixture's master: 600 s, its pool has none of its own
    assert r.status_code == 400, r.text
    assert "preemption_timeout: 2147483647 seconds is over the 600 seconds of resource pool 'default'" in r.text
    assert (await _create(api, {**CONFIG, "preemption_timeout": 600})).status_code == 200
    api.rt.settings.pools = [dataclasses.replace(p, preemption_timeout_s=120.0) for p in api.rt.settings.pools]
    r = await _create(api, {**CONFIG, "preemption_timeout": 121})
    assert r.status_code == 400 and "over the 120 seconds of resource pool 'default'" in r.text, r.text
    single = {**CONFIG, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
    parent = (await _create(api, {**single, "preemption_timeout": 60})).json()["experiment"]["id"]
    r = await _create(api, {**single, "preemption_timeout": 3600}, files=[], parentId=parent)  # a fork
    assert r.status_code == 400 and "preemption_timeout" in r.text, r.text
    assert (await api.post(f"/api/v1/experiments/{parent}/kill")).status_code == 200
    r = await api.post("/api/v1/experiments/continue",
                       json={"id": parent, "overrideConfig": "preemption_timeout: 3600\n"})
    assert r.status_code == 400 and "preemption_timeout" in r.text, r.text
    with pytest.raises(Exception, match="config.preemption_timeout: 3600 seconds is over the 120 seconds"):
        await checked_config(api.rt, {"preemption_timeout": 3600})
    r = await api.post("/api/v1/templates/long", json={"name": "long", "config": {"preemption_timeout": 3600},
                                                        "workspaceId": 0})
    assert r.status_code == 400 and "config.preemption_timeout" in r.text, r.text
    # stored before this rule (or moved to a stricter pool): its deadline is still the pool's
    assert api.rt.settings.preemption_timeout_for("default", 2**31 - 1) == 120
