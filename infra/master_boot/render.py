"""The master instance's boot script: EC2 user data / the GCE startup script.

Modelled on the agent's (`agent_image/boot/`): every value is shell-quoted, the join token goes to a
0600 file, the database password reaches psql on stdin. The keys only the instance knows
(`public_url`) or a local run replaces (`db.url`, `security.join_token_file`) are written by the
script itself; the rest of master.yaml is written as rendered.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from string import Template
from typing import Any, Literal

from infra.master_config import DB_NAME, DB_USER, INSTANCE_KEYS, to_yaml

TEMPLATE = Path(__file__).with_name("master-boot.sh.tmpl")
CLOUDS = ("aws", "gcp")
DB_KINDS = ("local", "rds", "cloudsql")


def _sql_literal(value: str) -> str:
    # standard_conforming_strings is on (PostgreSQL's default since 9.1): only ' is special.
    return "'" + value.replace("'", "''") + "'"


def render_master_boot(cloud: Literal["aws", "gcp"], master_config: dict[str, Any], *,
                       db: Literal["local", "rds", "cloudsql"], db_password: str, join_token: str) -> str:
    """`master_config` is `infra.master_config.master_config(...)`: its `db.url` is the default the
    script uses unless DET_MASTER_DB_URL is set; `db="local"` installs PostgreSQL on the instance."""
    if cloud not in CLOUDS:
        raise ValueError(f"cloud must be aws or gcp, got {cloud!r}")
    if db not in DB_KINDS:
        raise ValueError(f"db must be one of {', '.join(DB_KINDS)}, got {db!r}")
    if "\0" in db_password or "\n" in db_password:
        raise ValueError("the database password must be one line of text")
    body = {k: v for k, v in master_config.items() if k not in INSTANCE_KEYS}
    return Template(TEMPLATE.read_text()).substitute(
        cloud=cloud, cluster_id=shlex.quote(str(master_config.get("cluster_name", ""))), db_kind=db,
        port=int(master_config["port"]), host=shlex.quote(str(master_config.get("host", "0.0.0.0"))),
        join_token=shlex.quote(join_token),
        db_url=shlex.quote(str(master_config["db"]["url"])),
        db_password_sql=shlex.quote(_sql_literal(db_password)), db_user=DB_USER, db_name=DB_NAME,
        master_yaml=shlex.quote(to_yaml(body).rstrip("\n")),
    )
