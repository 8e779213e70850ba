"""Slot detection (--slots, nvidia-smi parsing) and flag parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_image.agent.config import parse_config
from agent_image.agent.slots import cpu_slots, detect_slots, parse_nvidia_smi


def test_cpu_slots_from_flag() -> None:
    slots = detect_slots(2, "cpu")
    assert [(s.id, s.type) for s in slots] == [(0, "cpu"), (1, "cpu")]


def test_default_is_one_cpu_slot_without_gpu() -> None:
    slots = detect_slots(None, "auto", gpu_cmd=["false"])
    assert [(s.id, s.type) for s in slots] == [(0, "cpu")]
    assert detect_slots(3, "auto", gpu_cmd=["/nonexistent/nvidia-smi"]) == cpu_slots(3)


def test_parse_nvidia_smi() -> None:
    out = "0, NVIDIA H100 80GB HBM3, GPU-aaa\n1, NVIDIA H100 80GB HBM3, GPU-bbb\n"
    slots = parse_nvidia_smi(out)
    assert [(s.id, s.type, s.brand, s.uuid) for s in slots] == [
        (0, "cuda", "NVIDIA H100 80GB HBM3", "GPU-aaa"),
        (1, "cuda", "NVIDIA H100 80GB HBM3", "GPU-bbb"),
    ]


def test_gpu_probe_via_fake_command(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, Tesla T4, GPU-123'\n")
    fake.chmod(0o755)
    slots = detect_slots(4, "auto", gpu_cmd=[str(fake)])
    assert [(s.id, s.type, s.uuid) for s in slots] == [(0, "cuda", "GPU-123")]


def test_config_defaults_and_ws_url(tmp_path: Path) -> None:
    cfg = parse_config(["--master", "https://m.example:8443/", "--join-token", "t", "--agent-id", "a1"])
    assert cfg.ws_url == "wss://m.example:8443/agents/ws"
    assert cfg.pool == "default"
    assert cfg.work_dir == (Path.home() / ".local/share/controlplane-agent/a1").resolve()
    cfg2 = parse_config(["--master", "http://127.0.0.1:8080", "--join-token", "t"])
    assert cfg2.ws_url == "ws://127.0.0.1:8080/agents/ws"


def test_config_token_file(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text("secret\n")
    cfg = parse_config(["--master", "http://x", "--join-token-file", str(f), "--work-dir", str(tmp_path)])
    assert cfg.join_token == "secret"


def test_config_requires_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_AGENT_JOIN_TOKEN", raising=False)
    with pytest.raises(SystemExit):
        parse_config(["--master", "http://x"])


def test_available_cpus_is_the_affinity_mask_capped_by_a_cgroup_quota(tmp_path: Path) -> None:
    import os

    from agent_image.agent.slots import available_cpus

    mask = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    assert available_cpus(str(tmp_path / "missing")) == mask
    cpu_max.write_text("max 100000\n")
    assert available_cpus(str(cpu_max)) == mask
    cpu_max.write_text("50000 100000\n")  # half a CPU: one
    assert available_cpus(str(cpu_max)) == 1
    cpu_max.write_text(f"{(mask + 8) * 100000} 100000\n")  # a quota above the mask: the mask
    assert available_cpus(str(cpu_max)) == mask
