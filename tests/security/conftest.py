"""The red-team suite's shared fixtures: the in-process master of the API tests (``api``) and the
browser tests' chromium (``chromium``, one per module)."""

from tests.controlplane.master.conftest import api  # noqa: F401 (a fixture)
from tests.webui.conftest import chromium  # noqa: F401 (a fixture)
