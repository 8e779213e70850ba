"""master.yaml's preemption timeout: Determined's default (an hour), its names for it, per pool."""

from __future__ import annotations

import pytest
import yaml

from controlplane.config.errors import ConfigError
from controlplane.master.settings import MasterSettings, load_settings


def settings_from(tmp_path, config: dict) -> MasterSettings:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(path)


def test_the_default_is_determineds_hour(tmp_path):
    settings = settings_from(tmp_path, {})
    assert settings.preemption_timeout_s == 3600
    assert settings.preemption_timeout_for("default") == 3600


@pytest.mark.parametrize("config", [
    {"preemption_timeout": "90s"},
    {"preemption_timeout": 90},
    {"task_container_defaults": {"preemption_timeout": 90}},  # Determined's name, in seconds
    {"preemption_timeout": "90s", "task_container_defaults": {"preemption_timeout": 90}},  # both, agreeing
])
def test_the_masters_timeout_by_either_name(tmp_path, config):
    assert settings_from(tmp_path, config).preemption_timeout_s == 90


def test_a_pools_timeout_wins_over_the_masters_and_an_experiments_over_both(tmp_path):
    settings = settings_from(tmp_path, {
        "preemption_timeout": "10m",
        "resource_pools": [{"pool_name": "default"},
                           {"pool_name": "spot", "task_container_defaults": {"preemption_timeout": 120}}]})
    assert [p.preemption_timeout_s for p in settings.pools] == [None, 120]
    assert settings.preemption_timeout_for("default") == 600
    assert settings.preemption_timeout_for("spot") == 120
    assert settings.preemption_timeout_for("spot", 7) == 7
    assert settings.preemption_timeout_for("default", 0) == 0
    assert settings.preemption_timeout_for("gone") == 600  # a pool no longer configured: the master's


@pytest.mark.parametrize(("config", "path"), [
    ({"preemption_timeout": "1h", "task_container_defaults": {"preemption_timeout": 60}}, "preemption_timeout"),
    ({"preemption_timeout": -1}, "preemption_timeout"),
    ({"preemption_timeout": True}, "preemption_timeout"),
    ({"task_container_defaults": {"preemption_timeout": "soon"}}, "task_container_defaults.preemption_timeout"),
    ({"resource_pools": [{"pool_name": "a", "task_container_defaults": {"preemption_timeout": 2**40}}]},
     "resource_pools[0].task_container_defaults.preemption_timeout"),
    ({"resource_pools": [{"pool_name": "a", "task_container_defaults": []}]},
     "resource_pools[0].task_container_defaults"),
])
def test_a_bad_timeout_names_its_field(tmp_path, config, path):
    with pytest.raises(ConfigError) as e:
        settings_from(tmp_path, config)
    assert e.value.path == path


async def test_the_initial_user_password_is_the_default_users_first_one(tmp_path):
    """Determined's ``security.initial_user_password`` (``det deploy local cluster-up
    --initial-user-password``): admin and determined are created with it, once."""
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from controlplane.master.db.models import Base
    from controlplane.master.services import auth

    settings = settings_from(tmp_path, {"security": {"initial_user_password": "Secr3tPw"}})
    assert settings.initial_user_password == "Secr3tPw"
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'users.db'}")
    try:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        sessions = async_sessionmaker(engine)
        async with sessions.begin() as session:
            await auth.ensure_default_users(session, settings.initial_user_password)
        async with sessions.begin() as session:
            await auth.login(session, "admin", "Secr3tPw", False)
            with pytest.raises(auth.Unauthenticated):
                await auth.login(session, "determined", "", False)
    finally:
        await engine.dispose()
