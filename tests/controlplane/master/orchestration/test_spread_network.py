"""The network of a gang or job spread over agents (``spread_network.py``): its members' addresses,
and when it runs on the hosts' network instead."""

from __future__ import annotations

from controlplane.master.orchestration.spread_network import plan


def test_each_agent_of_a_spread_gang_gets_one_address_in_placement_order_and_a_fresh_key() -> None:
    endpoints = {"a": ("10.0.0.5", 4000), "b": ("10.0.0.6", 4001), "c": ("10.0.0.7", 4002)}
    net = plan(["b", "a", "b"], endpoints)  # an agent named twice (two OpenPAI tasks) is one member
    assert net is not None
    assert [(m.address, m.host, m.port) for m in net.members] == [
        ("100.96.0.1", "10.0.0.6", 4001), ("100.96.0.2", "10.0.0.5", 4000)]
    assert net.address_of("a") == "100.96.0.2"
    told = net.for_agent("a")
    assert told.index == 1 and told.members == list(net.members) and len(bytes.fromhex(told.key)) == 32
    again = plan(["b", "a"], endpoints)
    assert again is not None and again.key != net.key, "every network signs with a key of its own"


def test_a_gang_on_one_agent_or_with_an_agent_on_its_host_network_gets_no_spread_network() -> None:
    endpoints = {"a": ("10.0.0.5", 4000), "b": ("10.0.0.6", 0)}
    assert plan(["a", "a"], endpoints) is None  # one agent: a namespace there, no overlay
    assert plan(["a", "b"], endpoints) is None  # b runs tasks on its host's network
    assert plan(["a", "gone"], endpoints) is None  # not connected
