"""A stand-in for the bake's builder instance: a local asyncssh server that runs each command for real
with bash, in a temp install root (`DET_IMAGE_ROOT`), with recording shims first on PATH.

The shims stand for what a real builder would change outside the root or what would take too long:
`sudo` (runs its command), `apt-get`, `systemctl`, `modprobe`, `nvidia-smi`, `bwrap` (record and
succeed) and `python3 -m venv` (makes a venv whose `pip install` records and writes det-agent and
det-master stand-ins, instead of installing the 1 GB project). Every shim call is a line in
`calls.log`. `fail=NAME` makes that shim print an error and exit 1, as a broken step would.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import asyncssh

from controlplane.exec.task_sshd import handler

_RECORD = 'echo "{name} ${{*//$\'\\n\'/ }}" >> "$DET_TEST_CALLS"\n'  # one line per call
_FAIL = 'if [ "${{DET_TEST_FAIL:-}}" = "{name}" ]; then echo "E: {name} broke on purpose" >&2; exit 1; fi\n'
_PIP = """#!/bin/bash
echo "pip $*" >> "$DET_TEST_CALLS"
if [ "${DET_TEST_FAIL:-}" = "pip" ]; then echo "ERROR: pip broke on purpose" >&2; exit 1; fi
if [ "$1" = install ]; then
  for b in det-agent det-master; do printf '#!/bin/bash\\necho %s\\n' "$b" > "$(dirname "$0")/$b"; \
chmod 755 "$(dirname "$0")/$b"; done
fi
"""


def write_shims(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    shims = {
        "sudo": '[ "${1:-}" = -n ] && shift\nexec "$@"\n',
        "apt-get": "exit 0\n",
        "systemctl": "exit 0\n",
        "modprobe": "exit 1\n",  # no GPU on the stand-in builder
        "nvidia-smi": "exit 0\n",
        "bwrap": "exit 0\n",
        "slirp4netns": "exit 0\n",
        "python3": ('if [ "${1:-}" = -m ] && [ "${2:-}" = venv ]; then\n'
                    '  mkdir -p "$3/bin"\n'
                    f"  cat > \"$3/bin/pip\" <<'PIP'\n{_PIP}PIP\n"
                    '  chmod 755 "$3/bin/pip"\n  exit 0\nfi\n'
                    f'exec {sys.executable} "$@"\n'),
    }
    for name, body in shims.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + _RECORD.format(name=name) + _FAIL.format(name=name) + body)
        path.chmod(0o755)


class BuilderSshServer:
    """`with BuilderSshServer(tmp_path) as b:` -> b.port, b.root, b.client_key, b.calls(); fail= a shim name."""

    def __init__(self, base: Path, *, fail: str | None = None) -> None:
        self.root = base / "image-root"
        self.root.mkdir(parents=True)
        self.bin = base / "shims"
        write_shims(self.bin)
        self.calls_log = base / "calls.log"
        self.calls_log.touch()
        self.client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.env = {"PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin", "DET_IMAGE_ROOT": str(self.root),
                    "DET_TEST_CALLS": str(self.calls_log), "HOME": str(base), "LANG": "C.UTF-8"}
        if fail:
            self.env["DET_TEST_FAIL"] = fail
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="builder-sshd", daemon=True)
        self._acceptor: asyncssh.SSHAcceptor | None = None

    @property
    def host_key_line(self) -> str:
        return self.host_key.export_public_key().decode().strip()

    def calls(self) -> list[str]:
        return self.calls_log.read_text().splitlines()

    async def _listen(self) -> asyncssh.SSHAcceptor:
        authorized = asyncssh.import_authorized_keys(self.client_key.export_public_key().decode())
        return await asyncssh.listen("127.0.0.1", 0, server_host_keys=[self.host_key],
                                     authorized_client_keys=authorized, process_factory=handler(self.env),
                                     encoding=None, allow_scp=False, agent_forwarding=False, x11_forwarding=False)

    def __enter__(self) -> BuilderSshServer:
        self._thread.start()
        self._acceptor = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port = self._acceptor.get_port()
        return self

    def __exit__(self, *_: object) -> None:
        async def close() -> None:
            if self._acceptor is not None:
                self._acceptor.close()
                await self._acceptor.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
