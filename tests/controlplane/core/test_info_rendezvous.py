"""ClusterInfo reads the gang's rendezvous.json (Determined's keys) and ports.json (the master's ports)."""

from __future__ import annotations

import json
from pathlib import Path

from controlplane.core._info import get_cluster_info

CLUSTER = {"master_url": "http://m:8080", "cluster_id": "c", "agent_id": "a", "slot_ids": [0, 1],
           "task_id": "t", "allocation_id": "t.1", "session_token": "tok", "task_type": "TRIAL"}


def test_rendezvous_fields(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "rendezvous.json").write_text(json.dumps({
        "container_addrs": ["10.0.0.1", "10.0.0.2"], "container_rank": 1, "container_slot_counts": [2, 2]}))
    (tmp_path / "ports.json").write_text(json.dumps({
        "chief_port": 21000, "dist_ports": [21001, 21002], "ssh_ports": [0, 21003],
        "ssh_key_file": "ssh/id_ed25519"}))
    info = get_cluster_info({"DET_INFO_DIR": str(tmp_path)})
    assert info is not None
    assert (info.container_addrs, info.container_rank, info.container_slot_counts) == (
        ["10.0.0.1", "10.0.0.2"], 1, [2, 2])
    assert (info.chief_port, info.dist_ports, info.ssh_ports) == (21000, [21001, 21002], [0, 21003])
    assert info.ssh_key_file == str(tmp_path / "ssh/id_ed25519")


def test_without_a_ports_file_there_are_no_ports(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "rendezvous.json").write_text(json.dumps({
        "container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [2]}))
    info = get_cluster_info({"DET_INFO_DIR": str(tmp_path)})
    assert info is not None and info.chief_port == 0 and info.dist_ports == [] and info.ssh_key_file is None
