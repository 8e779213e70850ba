"""The red-team suite's shared fixtures: the in-process master of the API tests (``api``)."""

from tests.controlplane.master.conftest import api  # noqa: F401 (a fixture)
