"""Running steps over SSH: host-key pinning, bounded retries while SSH is not up, streamed output,
and a failing step's name, exit code and output tail."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import asyncssh
import pytest

from agent_image.bake.errors import BakeError, StepFailed
from agent_image.bake.ssh import SshTarget, provision
from agent_image.bake.steps import Step, Upload
from tests.agent_image.bake.builder_rig import BuilderSshServer

STEPS = [Step("hello", 'echo "hello from $R"'),
         Step("write", 'cat "$R/etc/greeting"', (Upload("/etc/greeting", b"hi there\n"),))]


def target(builder: BuilderSshServer, host_keys: tuple[str, ...] = ()) -> SshTarget:
    return SshTarget("127.0.0.1", builder.port, "ubuntu", builder.client_key, host_keys)


def test_output_is_streamed_with_the_step_prefix_and_a_pinned_key_is_trusted(builder: BuilderSshServer) -> None:
    lines: list[str] = []
    asyncio.run(provision(target(builder, (builder.host_key_line,)), STEPS, emit=lines.append))
    assert f"[step 1/2 hello] hello from {builder.root}" in lines
    assert "[step 2/2 write] hi there" in lines
    assert not [line for line in lines if "first use" in line]  # pinned: no note
    assert "sudo -n bash -c set -euo pipefail" in " ".join(builder.calls())


def test_without_a_reported_host_key_the_first_one_is_accepted_with_a_note(builder: BuilderSshServer) -> None:
    lines: list[str] = []
    asyncio.run(provision(target(builder), STEPS[:1], emit=lines.append))
    fingerprint = builder.host_key.get_fingerprint()
    assert f"note: the cloud did not report the builder's host key; accepted {fingerprint} on first use" in lines


def test_a_host_key_other_than_the_reported_one_is_refused_at_once(builder: BuilderSshServer) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with pytest.raises(BakeError, match="not the one its cloud reported"):
        asyncio.run(provision(target(builder, (other,)), STEPS, emit=lambda _l: None, deadline_s=30))
    assert builder.calls() == []


def test_a_failing_step_says_its_name_exit_code_and_last_output(builder: BuilderSshServer) -> None:
    steps = [Step("breaks", 'for i in $(seq 1 30); do echo "line $i"; done; echo "the real reason" >&2; exit 7'),
             Step("never", "touch \"$R/never\"")]
    with pytest.raises(StepFailed) as info:
        asyncio.run(provision(target(builder), steps, emit=lambda _l: None))
    assert (info.value.step, info.value.exit_code) == ("breaks", 7)
    assert info.value.message == "provisioning step 'breaks' failed with exit code 7: the real reason"
    assert info.value.tail.splitlines()[-2:] == ["line 30", "the real reason"]
    assert "line 1" not in info.value.tail.splitlines()  # only the tail
    assert not (builder.root / "never").exists()


def test_an_ssh_that_never_comes_up_fails_within_the_deadline(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits: list[str] = []
    key = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(BakeError, match="did not come up within 0.5 s"):
        asyncio.run(provision(SshTarget("127.0.0.1", port, "ubuntu", key), STEPS, emit=waits.append,
                              deadline_s=0.5, retry_every_s=0.1))
    assert waits and all("waiting for the builder's SSH" in w for w in waits)


def test_a_key_the_builder_never_accepts_is_a_clear_error(builder: BuilderSshServer) -> None:
    stranger = SshTarget("127.0.0.1", builder.port, "ubuntu", asyncssh.generate_private_key("ssh-ed25519"))
    with pytest.raises(BakeError, match="refused the bake's SSH key"):
        asyncio.run(provision(stranger, STEPS, emit=lambda _l: None, deadline_s=0.5, retry_every_s=0.1))
