"""The bake's provisioning plan, as data: what runs on the builder, in order.

Pure: `plan(...)` returns `Step`s (a name, a bash command run as root, files to upload first);
`ssh.run_steps` carries them out. Every path on the builder is written under `$R`, the value of
`DET_IMAGE_ROOT` (empty on a real builder), so the tests run the very same commands in a temp dir
with recording stand-ins for apt-get, systemctl and pip.

What the image ends up with: `/opt/controlplane/.venv` (the project installed: det-agent and
det-master), bubblewrap (the agent refuses to run without it), slirp4netns and iproute2 (each job's
tasks in a network of their own), `det-agent-boot.service` enabled to run
`/opt/controlplane/bin/det-image-boot.sh` at boot, optionally the NVIDIA driver, and no state of the
builder that would make its instances alike (apt caches, SSH host keys, cloud-init state, the bake's
SSH key, the machine id).
"""

from __future__ import annotations

import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT_VAR = "DET_IMAGE_ROOT"
PREFIX = "/opt/controlplane"
VENV = f"{PREFIX}/.venv"
SOURCE_ARCHIVE = f"{PREFIX}/src.tar.gz"
SOURCE_DIR = f"{PREFIX}/src"
BOOT_SCRIPT = f"{PREFIX}/bin/det-image-boot.sh"
IMAGE_ENV = f"{PREFIX}/image.env"
UNIT_NAME = "det-agent-boot.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
# cloud-init would run a user-data script itself; in this image det-agent-boot.service runs it, once.
CLOUD_INIT_DROP_IN = "/etc/cloud/cloud.cfg.d/99-det-agent-image.cfg"
NVIDIA_DRIVER_PACKAGE = "nvidia-driver-550-server"
FILES = Path(__file__).with_name("files")
# The installed package tree the image's venv is built from (pyproject's packages.find).
PACKAGE_DIRS = ("controlplane", "agent_image", "provisioners", "launchers", "infra")
TOP_FILES = ("pyproject.toml", "README.md")
_SKIPPED = {"__pycache__", "node_modules", ".mypy_cache", ".pytest_cache"}
APT_PACKAGES = ("python3", "python3-venv", "python3-pip", "bubblewrap", "slirp4netns", "iproute2", "curl",
                "ca-certificates")
CLOUDS = ("aws", "gcp")

PREAMBLE = f"""set -euo pipefail
R="${{{ROOT_VAR}:-}}"
export DEBIAN_FRONTEND=noninteractive
fail() {{ echo "$*" >&2; exit 1; }}
"""


@dataclass(frozen=True)
class Upload:
    """A file written on the builder (under $R) before its step's command runs."""

    path: str  # absolute on the image, e.g. /etc/systemd/system/det-agent-boot.service
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Step:
    name: str
    command: str  # bash, run as root after PREAMBLE
    uploads: tuple[Upload, ...] = ()


def script(command: str) -> str:
    """The whole bash program a step's command (or an upload) runs as."""
    return PREAMBLE + command


def upload_command(upload: Upload) -> str:
    """Writes the upload's bytes, read from stdin, to `$R<path>` (atomically, with its mode)."""
    path = PurePosixPath(upload.path)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"an upload's path must be absolute and plain, got {upload.path!r}")
    target, parent = shlex.quote(str(path)), shlex.quote(str(path.parent))
    tmp = shlex.quote(f"{path}.det-upload")
    return (f'install -d -m 0755 "$R"{parent}\n'
            f'cat > "$R"{tmp}\n'
            f'chmod {upload.mode:04o} "$R"{tmp}\n'
            f'mv -f "$R"{tmp} "$R"{target}\n')


def source_archive(root: Path | None = None) -> bytes:
    """A tar.gz of the project as installed here (its packages, pyproject.toml, README.md), built in
    memory: the builder pip-installs exactly this code."""
    root = root or Path(__file__).resolve().parents[2]
    missing = [name for name in TOP_FILES if not (root / name).is_file()]
    if missing or not (root / "controlplane").is_dir():
        what = ", ".join(missing) or "controlplane/"
        raise FileNotFoundError(f"the project's source tree is not at {root} (no {what}); "
                                "bake from a checkout installed with `pip install -e`")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = PurePosixPath(info.name).parts
        if _SKIPPED.intersection(parts) or info.name.endswith((".pyc", ".pyo")):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in (*PACKAGE_DIRS, *TOP_FILES):
            if (root / name).exists():
                tar.add(root / name, arcname=name, filter=keep)
    return buf.getvalue()


def _packages() -> Step:
    apt = " ".join(APT_PACKAGES)
    return Step("packages", f"""apt-get update -q
apt-get install -y -q --no-install-recommends {apt}
command -v bwrap >/dev/null || fail "bubblewrap (bwrap) is missing after apt-get install: det-agent needs it"
command -v slirp4netns >/dev/null || fail "slirp4netns is missing after apt-get install: det-agent's networks need it"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \\
  || fail "the base image's python3 is older than 3.11, which the project needs: use a newer base image"
""")


def _source(archive: bytes) -> Step:
    return Step("source", f"""rm -rf "$R"{SOURCE_DIR}
install -d -m 0755 "$R"{SOURCE_DIR}
tar -xzf "$R"{SOURCE_ARCHIVE} -C "$R"{SOURCE_DIR}
test -f "$R"{SOURCE_DIR}/pyproject.toml || fail "the source archive has no pyproject.toml"
""", (Upload(SOURCE_ARCHIVE, archive, 0o600),))


def _venv() -> Step:
    return Step("venv", f"""python3 -m venv "$R"{VENV}
"$R"{VENV}/bin/pip install --no-cache-dir --quiet "$R"{SOURCE_DIR}
for bin in det-agent det-master; do
  test -x "$R"{VENV}/bin/$bin || fail "$bin is missing from {VENV}/bin after pip install"
done
""")


def _boot_unit(cloud: str) -> Step:
    unit = (FILES / UNIT_NAME).read_bytes()
    boot = (FILES / "det-image-boot.sh").read_bytes()
    uploads = (
        Upload(UNIT_PATH, unit),
        Upload(BOOT_SCRIPT, boot, 0o755),
        Upload(IMAGE_ENV, f"DET_IMAGE_CLOUD={cloud}\n".encode()),
        Upload(CLOUD_INIT_DROP_IN, b"# det-agent-boot.service runs the user data (det agent-image bake)\n"
                                   b"allow_userdata: false\n"),
    )
    # GCE's guest environment runs the startup-script itself; in this image the unit does.
    gce_runner = ("""for d in lib usr/lib; do
  if [ -e "$R/$d/systemd/system/google-startup-scripts.service" ]; then
    systemctl ${R:+--root="$R"} disable google-startup-scripts.service
  fi
done
""" if cloud == "gcp" else "")
    return Step("boot unit", f"""[ -n "$R" ] || systemctl daemon-reload
systemctl ${{R:+--root="$R"}} enable {UNIT_NAME}
{gce_runner}""", uploads)


def _nvidia(package: str) -> Step:
    return Step("nvidia driver", f"""apt-get install -y -q --no-install-recommends {shlex.quote(package)}
command -v nvidia-smi >/dev/null || fail "nvidia-smi is missing after installing {package}"
# The builder may have no GPU: then the driver is checked by its first GPU instance.
if [ -e /proc/driver/nvidia/version ] || modprobe nvidia 2>/dev/null; then
  nvidia-smi
else
  echo "no NVIDIA GPU on the builder: the driver is installed, nvidia-smi runs on the GPU instances"
fi
""")


def _cleanup() -> Step:
    return Step("cleanup", f"""apt-get clean
rm -rf "$R"/var/lib/apt/lists/*
rm -f "$R"{SOURCE_ARCHIVE}
# Instances made from the image must each get their own host keys, cloud-init run and machine id,
# and must not trust the bake's temporary SSH key.
rm -f "$R"/etc/ssh/ssh_host_*
rm -rf "$R"/var/lib/cloud/instances "$R"/var/lib/cloud/instance "$R"/var/lib/cloud/data "$R"/var/lib/cloud/sem
rm -f "$R"/var/log/cloud-init.log "$R"/var/log/cloud-init-output.log
rm -f "$R"/root/.ssh/authorized_keys "$R"/home/*/.ssh/authorized_keys
if [ -f "$R"/etc/machine-id ]; then : > "$R"/etc/machine-id; fi
sync
""")


def plan(cloud: str, *, source: bytes, nvidia_driver: bool = False,
         driver_package: str = NVIDIA_DRIVER_PACKAGE) -> list[Step]:
    """The provisioning steps for an image of `cloud`; `source` is `source_archive()`."""
    if cloud not in CLOUDS:
        raise ValueError(f"cloud must be one of {', '.join(CLOUDS)}, got {cloud!r}")
    steps = [_packages(), _source(source), _venv(), _boot_unit(cloud)]
    if nvidia_driver:
        steps.append(_nvidia(driver_package))
    steps.append(_cleanup())
    return steps
