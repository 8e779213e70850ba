"""`det`: the command-line client of the controlplane master (console script `det`).

Global flags come before the group, as in Determined: `det [-m URL] [-u USER] <group> <cmd>`.
Every failure a user can cause or hit (bad input, master error, master down, Ctrl-C) ends as
one `Error: ...` line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from controlplane.cli import (
    agent,
    agent_image,
    checkpoint,
    command,
    deploy_parser,
    experiment,
    job,
    model,
    notebook,
    pai,
    resource_pool,
    shell,
    template,
    tensorboard,
    trial,
    user,
)
from controlplane.cli.errors import CliError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="Control a controlplane (Determined-compatible) training cluster.")
    parser.add_argument("-m", "--master", metavar="URL",
                        help="master address (default: $DET_MASTER, $DET_MASTER_ADDR or localhost:8080)")
    parser.add_argument("-u", "--user", metavar="NAME", help="act as this user (prompts for a password if needed)")
    parser.add_argument("--version", action="store_true", help="print the client version and exit")
    groups = parser.add_subparsers(dest="group", metavar="GROUP")
    for module in (user, experiment, trial, checkpoint, job, model, template, resource_pool, agent, deploy_parser, pai,
                   command, shell, notebook, tensorboard, agent_image):
        module.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.version:
        from controlplane.version import __version__

        print(f"det {__version__}")
        return 0
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except CliError as e:
        sys.stdout.flush()
        print(f"Error: {e.message}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `det ... | head`: stop quietly, and keep the exit-time flush quiet too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
