"""Boot scripts for cloud instances: EC2 user data and the GCE startup script.

One template for both clouds; values are shell-quoted, the join token goes to a 0600 file
and never onto a command line (where `ps` would show it).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from string import Template

TEMPLATE = Path(__file__).with_name("agent-boot.sh.tmpl")
KINDS = {"ec2-user-data": "aws", "gce-startup-script": "gcp"}


def render_boot_script(kind: str, *, master_url: str, join_token: str, pool: str,
                       extra_args: list[str] | None = None) -> str:
    if kind not in KINDS:
        raise ValueError(f"boot script kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return Template(TEMPLATE.read_text()).substitute(
        kind=kind, cloud=KINDS[kind], master_url=shlex.quote(master_url), join_token=shlex.quote(join_token),
        pool=shlex.quote(pool), extra_args=" ".join(shlex.quote(a) for a in extra_args or []),
    )
