"""What the AWS and GCE bakes share: options checks, names, the image's tags, timeouts, and
running the plan over SSH from synchronous code."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from agent_image.bake.errors import BakeError
from agent_image.bake.ssh import Emit, SshTarget, provision
from agent_image.bake.steps import Step

ROLE_TAG, BAKE_TAG, IMAGE_TAG = "det-role", "det-bake", "det-agent-image"
HOST_KEYS_BEGIN, HOST_KEYS_END = "-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----"
_KEY_LINE = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp\d+|ssh-rsa)\s+([A-Za-z0-9+/=]+)")


@dataclass(frozen=True)
class Timeouts:
    """Bounds on every wait of a bake; tests shrink them."""

    ssh_deadline_s: float = 300.0  # for the builder's SSH to come up
    ssh_retry_s: float = 5.0
    host_key_wait_s: float = 60.0  # for the cloud to report the builder's host key
    poll_s: float = 5.0  # between looks at an instance or image state
    instance_wait_s: float = 600.0  # running, stopped, terminated
    image_wait_s: float = 3600.0  # the image becoming available (large disks take long)


DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class BakeResult:
    image_id: str
    bake_id: str
    name: str
    tags: dict[str, str] = field(default_factory=dict)


def new_bake_id() -> str:
    return secrets.token_hex(4)


def image_name(bake_id: str, version: str) -> str:
    """Unique per account: the version, the UTC time and the bake's id."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"det-agent-{re.sub(r'[^a-z0-9-]', '-', version.lower())}-{stamp}-{bake_id}"


def image_tags(bake_id: str, base_image: str, nvidia_driver: bool) -> dict[str, str]:
    from controlplane.version import __version__

    return {IMAGE_TAG: "true", BAKE_TAG: bake_id, "det-version": __version__, "det-base-image": base_image,
            "det-nvidia-driver": "true" if nvidia_driver else "false"}


def check_ssh_cidr(cidr: str) -> str:
    """The network the builder's SSH is opened to: a valid CIDR that is not the whole internet."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise BakeError(f"--ssh-cidr {cidr!r} is not a network such as 203.0.113.7/32") from None
    if net.prefixlen == 0:
        raise BakeError(f"--ssh-cidr {cidr} would open the builder's SSH to the whole internet: name your own network")
    return str(net)


def host_keys_from_console(text: str) -> tuple[str, ...]:
    """The host keys cloud-init prints to the console between its BEGIN/END SSH HOST KEY KEYS lines."""
    if HOST_KEYS_BEGIN not in text:
        return ()
    block = text.split(HOST_KEYS_BEGIN, 1)[1].split(HOST_KEYS_END, 1)[0]
    keys = []
    for line in block.splitlines():
        m = _KEY_LINE.match(line.strip())
        if m:
            keys.append(f"{m.group(1)} {m.group(2)}")
    return tuple(keys)


def provision_builder(target: SshTarget, steps: Sequence[Step], emit: Emit, timeouts: Timeouts) -> None:
    """Run the plan on the builder (a fresh event loop: the bake itself is synchronous)."""
    emit(f"provisioning the builder over SSH at {target.host}:{target.port} ({len(steps)} steps)")
    asyncio.run(provision(target, steps, emit=emit, deadline_s=timeouts.ssh_deadline_s,
                          retry_every_s=timeouts.ssh_retry_s))


@contextmanager
def removing(left: list[str], what: str, emit: Emit) -> Iterator[None]:
    """One cleanup action: a failure is said and noted in `left`, and the cleanup goes on."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - keep removing the rest, and say what is left
        left.append(what)
        emit(f"warning: could not remove {what}: {getattr(e, 'message', e)}; remove it by hand")
