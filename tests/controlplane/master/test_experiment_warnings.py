"""What a create answer warns about: a grid whose max_trials runs only part of it. Determined's
`warnings` (launch-warning enum values its client maps to texts) stays empty; the words go in
`warningMessages`."""

from __future__ import annotations

import yaml

from tests.controlplane.master.conftest import CONFIG

GRID = {**CONFIG, "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01, 0.001]},
                                      "units": {"type": "int", "minval": 8, "maxval": 64, "count": 2}},
        "searcher": {"name": "grid", "metric": "loss", "max_trials": 4, "max_length": {"batches": 10}}}


async def create(api, config: dict, **extra) -> dict:
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(config), "modelDefinition": [], **extra})
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_grid_cut_short_by_max_trials_is_warned_about(api):
    body = await create(api, GRID)
    assert body["warnings"] == []
    assert body["warningMessages"] == ["searcher.max_trials: 4 is below the grid's 6 points: only the first 4 (in "
                                       "grid order) will be trained; raise max_trials to 6 to search the whole grid"]
    assert (await create(api, GRID, validateOnly=True))["warningMessages"] == body["warningMessages"]


async def test_a_whole_grid_or_another_searcher_has_nothing_to_warn_about(api):
    whole = {**GRID, "searcher": {**GRID["searcher"], "max_trials": 6}}
    assert (await create(api, whole))["warningMessages"] == []
    assert (await create(api, CONFIG))["warningMessages"] == []


async def test_a_launcher_whose_package_the_default_environment_lacks_is_warned_about(api, monkeypatch):
    from controlplane.config.experiment import parse_experiment_config
    from controlplane.master.services import launcher_checks

    monkeypatch.setattr(launcher_checks, "_installed", lambda package: package != "horovod")
    horovod = {**CONFIG, "entrypoint": "python3 -m determined.launch.horovod --trial model_def:T"}
    (message,) = (await create(api, horovod, validateOnly=True))["warningMessages"]
    assert message.startswith("entrypoint: the horovod launcher needs the 'horovod' package")
    deepspeed = {**CONFIG, "entrypoint": ["python3", "-m", "launchers.deepspeed", "train.py"]}
    assert (await create(api, deepspeed, validateOnly=True))["warningMessages"] == []  # installed
    # Another environment: the agents that offer it know what it holds.
    elsewhere = parse_experiment_config({**horovod, "environment": {"image": "hvd-env"}})
    assert launcher_checks.launcher_warnings(elsewhere) == []
