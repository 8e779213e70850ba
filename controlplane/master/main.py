"""det-master --config master.yaml: read the settings, build the app, serve it."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det-master", description="Run the controlplane master.")
    parser.add_argument("--config", help="path to master.yaml")
    parser.add_argument("--port", type=int, help="override the port of the config")
    parser.add_argument("--data-dir", help="override data_dir of the config")
    args = parser.parse_args(argv)

    from controlplane.config.errors import ConfigError
    from controlplane.master.settings import MasterSettings, load_settings

    try:
        if args.config:
            settings = load_settings(args.config)
        else:
            from pathlib import Path

            settings = MasterSettings(data_dir=Path(args.data_dir or Path.home() / ".local/share/controlplane/master"))
    except ConfigError as e:
        print(f"det-master: invalid config: {e}", file=sys.stderr)
        return 2
    if args.port:
        settings.port = args.port
    if args.data_dir:
        from pathlib import Path

        settings.data_dir = Path(args.data_dir)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not settings.join_token:
        logging.getLogger("controlplane.master").warning(
            "no join token configured (security.join_token_file): agents cannot register")

    from controlplane.master.serving import Listeners

    try:
        listeners = Listeners(settings)  # the API's port and the task proxy's (proxy_port)
    except ConfigError as e:
        print(f"det-master: invalid config: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"det-master: cannot listen on {settings.host} (port {settings.port}, proxy_port "
              f"{settings.proxy_port}): {e.strerror or e}", file=sys.stderr)
        return 1
    listeners.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
