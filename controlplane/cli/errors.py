"""The one exception the CLI turns into `Error: <message>` on stderr and exit status 1.

Every user mistake (bad flag value, missing file, master error, unreachable master) is raised
as CliError so that `main` can print it without a traceback, like Determined's CLI does.
"""

from __future__ import annotations


class CliError(Exception):
    """A failure explained to the user in one line; `exit_code` is the process status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ApiError(CliError):
    """The master answered with an error status; `status` is the HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
