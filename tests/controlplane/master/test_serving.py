"""The task proxy's port stays the same across master restarts: ``proxy_port: 0`` picks a free
port once, records it in the data dir (owner-only), and takes it again at the next start; when it
is taken by then, the master listens on another and records that one."""

from __future__ import annotations

import socket
import stat

from controlplane.master import serving
from controlplane.master.settings import MasterSettings


def test_the_proxy_port_picked_once_is_taken_again_at_the_next_start(tmp_path):
    settings = MasterSettings(data_dir=tmp_path / "master", port=0)
    first = serving._bind_proxy(settings)
    port = first.getsockname()[1]
    first.close()  # the master stopped (or crashed)
    recorded = tmp_path / "master" / serving.PROXY_PORT_FILE
    assert recorded.read_text().strip() == str(port)
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o600
    again = serving._bind_proxy(settings)
    try:
        assert again.getsockname()[1] == port
    finally:
        again.close()


def test_a_recorded_port_taken_by_then_gives_another_recorded_in_its_place(tmp_path, caplog):
    settings = MasterSettings(data_dir=tmp_path, port=0)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    taken = squatter.getsockname()[1]
    serving.record_proxy_port(tmp_path, taken)
    try:
        sock = serving._bind_proxy(settings)
        try:
            assert sock.getsockname()[1] != taken
            assert serving.recorded_proxy_port(tmp_path) == sock.getsockname()[1]
        finally:
            sock.close()
    finally:
        squatter.close()
    assert f"port {taken}" in caplog.text and "is taken" in caplog.text


def test_an_explicit_proxy_port_is_used_and_not_recorded(tmp_path):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sock = serving._bind_proxy(MasterSettings(data_dir=tmp_path, port=0, proxy_port=port))
    try:
        assert sock.getsockname()[1] == port
    finally:
        sock.close()
    assert not (tmp_path / serving.PROXY_PORT_FILE).exists()
