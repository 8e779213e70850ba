"""Where a deployment's Pulumi state and its secrets passphrase live.

Default: a local file backend, `file://<config>/controlplane/pulumi/state` (`XDG_CONFIG_HOME` or
`~/.config`), directories 0700. `--state-bucket s3://...|gs://...` keeps the state in a bucket
instead (Pulumi's DIY backends), so a team can share it.

Stack secrets (the join token, the database password) are encrypted with Pulumi's `passphrase`
provider. The passphrase is generated once into `<config>/controlplane/pulumi/passphrase` (0600)
and handed to Pulumi only through `PULUMI_CONFIG_PASSPHRASE_FILE`; it is never printed. A user
who sets `PULUMI_CONFIG_PASSPHRASE` or `PULUMI_CONFIG_PASSPHRASE_FILE` keeps their own. Each
stack's config (`Pulumi.<cluster-id>.yaml`, with the encrypted secrets) lives in
`<config>/controlplane/pulumi/projects/<project>/`: with a state bucket, copy the `pulumi/`
folder to run `up` or `down` for the same cluster from another machine. Losing the passphrase
loses the secrets, not the cluster: `down` still works by tag.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

PASSPHRASE_FILE = "passphrase"
_BUCKET_SCHEMES = ("s3://", "gs://")


def config_root() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "controlplane" / "pulumi"


@dataclass(frozen=True)
class Backend:
    url: str  # file://... | s3://... | gs://...
    root: Path  # the local folder with the passphrase and the projects' stack config

    def project_dir(self, project: str) -> Path:
        return _private_dir(self.root / "projects" / project)

    def env(self) -> dict[str, str]:
        """The environment Pulumi runs with: the backend, and the passphrase unless the user brings one."""
        env = {"PULUMI_BACKEND_URL": self.url, "PULUMI_SKIP_UPDATE_CHECK": "true"}
        if not (os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")):
            env["PULUMI_CONFIG_PASSPHRASE_FILE"] = str(ensure_passphrase(self.root))
        return env


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def ensure_passphrase(root: Path) -> Path:
    """`<root>/passphrase`, created once with 0600 and reused: regenerating it would orphan the secrets."""
    path = _private_dir(root) / PASSPHRASE_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(path, 0o600)
    return path


def backend_for(state_bucket: str | None = None, root: Path | None = None) -> Backend:
    """The local file backend, or the bucket `--state-bucket` names (`s3://NAME[/prefix]`, `gs://...`)."""
    root = root or config_root()
    if state_bucket:
        if not state_bucket.startswith(_BUCKET_SCHEMES) or len(state_bucket.split("://", 1)[1].strip("/")) == 0:
            from infra.options import OptionError

            raise OptionError("--state-bucket", f"expected s3://BUCKET or gs://BUCKET, got {state_bucket!r}")
        return Backend(url=state_bucket.rstrip("/"), root=root)
    state = _private_dir(_private_dir(root) / "state")
    return Backend(url=f"file://{state}", root=root)
