"""What can stop the engine, as one sentence each; the CLI prints them as `Error: ...`."""

from __future__ import annotations

import shutil

INSTALL_HINT = ("the Pulumi CLI is not installed (no `pulumi` on PATH): install it with "
                "`curl -fsSL https://get.pulumi.com | sh` (or see https://www.pulumi.com/docs/install/), "
                "open a new shell so that `pulumi version` works, and run this again; "
                "`--dry-run` works without it")


class EngineError(Exception):
    """A stack operation failed; the message is the provider's or Pulumi's own words."""


class PulumiMissing(EngineError):
    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


class Refused(EngineError):
    """The user did not confirm a change that needs confirming (a replacement, a `down`)."""


def require_pulumi_cli() -> None:
    """Raise PulumiMissing before anything else happens: the Automation API only says "'pulumi'"."""
    if shutil.which("pulumi") is None:
        raise PulumiMissing()
