"""The agent's addresses (``addresses.py``): the first is where the master and other agents reach it."""

from __future__ import annotations

from agent_image.agent.addresses import _source_toward, local_addresses


def test_the_address_toward_the_master_comes_first() -> None:
    assert local_addresses("http://localhost:8080")[0] == "127.0.0.1"
    assert local_addresses("")[0] == "127.0.0.1"
    outbound = _source_toward("10.255.255.255")  # this host's address on its default route, if any
    if outbound is not None and not outbound.startswith("127."):
        # a master on another host: the agent is reached at its address on the way there, not at
        # its loopback (which a gang's ranks and the master's proxy on other hosts cannot reach)
        found = local_addresses("http://198.51.100.7:8080")  # TEST-NET-2: routed out, never answered
        assert found[0] == outbound and "127.0.0.1" in found
