from tests.controlplane.core.conftest import fake_master  # noqa: F401 (fixture)
