"""The provisioning plan, run for real with bash in a temp install root (no SSH): what each cloud's
image gets, the optional NVIDIA step, and the cleanup that makes instances of the image fresh."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from agent_image.bake import steps
from tests.agent_image.bake.builder_rig import write_shims


def run_plan(plan: list[steps.Step], root: Path, tmp_path: Path, fail: str | None = None) -> list[str]:
    """Runs every upload and command as the SSH runner does; returns the shims' calls."""
    write_shims(tmp_path / "shims")
    calls = tmp_path / "calls.log"
    env = {"PATH": f"{tmp_path / 'shims'}:{os.environ['PATH']}", "DET_IMAGE_ROOT": str(root),
           "DET_TEST_CALLS": str(calls), **({"DET_TEST_FAIL": fail} if fail else {})}
    for step in plan:
        for upload in step.uploads:
            subprocess.run(["bash", "-c", steps.script(steps.upload_command(upload))], input=upload.data, env=env,
                           check=True, timeout=60)
        subprocess.run(["bash", "-c", steps.script(step.command)], env=env, check=True, timeout=60)
    return calls.read_text().splitlines()


def test_the_steps_come_in_order_and_the_driver_only_when_asked() -> None:
    assert [s.name for s in steps.plan("aws", source=b"")] == ["packages", "source", "venv", "boot unit", "cleanup"]
    assert [s.name for s in steps.plan("gcp", source=b"", nvidia_driver=True)] == [
        "packages", "source", "venv", "boot unit", "nvidia driver", "cleanup"]
    with pytest.raises(ValueError, match="aws, gcp"):
        steps.plan("azure", source=b"")


def test_the_source_archive_holds_the_installed_packages_and_no_bytecode() -> None:
    with tarfile.open(fileobj=io.BytesIO(steps.source_archive()), mode="r:gz") as tar:
        names = tar.getnames()
    assert {"pyproject.toml", "README.md", "agent_image/bake/files/det-image-boot.sh",
            "agent_image/boot/agent-boot.sh.tmpl", "provisioners/ec2.py", "controlplane/cli/main.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_a_tree_without_pyproject_is_refused(tmp_path: Path) -> None:
    (tmp_path / "controlplane").mkdir()
    with pytest.raises(FileNotFoundError, match="pyproject.toml"):
        steps.source_archive(tmp_path)


def test_the_cleanup_leaves_no_builder_identity_in_the_image(tmp_path: Path) -> None:
    root = tmp_path / "root"
    leftovers = ["etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub", "var/lib/cloud/instances/i-1/x",
                 "var/lib/cloud/instance", "home/ubuntu/.ssh/authorized_keys", "root/.ssh/authorized_keys",
                 "var/lib/apt/lists/archive_Packages", "var/log/cloud-init.log"]
    for rel in leftovers:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("builder's own\n")
    (root / "etc/machine-id").write_text("0123456789abcdef\n")
    (root / "etc/ssh/sshd_config").write_text("kept\n")

    calls = run_plan(steps.plan("aws", source=steps.source_archive()), root, tmp_path)

    assert [rel for rel in leftovers if (root / rel).exists()] == []
    assert (root / "etc/machine-id").read_text() == ""
    assert (root / "etc/ssh/sshd_config").read_text() == "kept\n"
    assert "apt-get clean" in calls
    assert (root / "etc/cloud/cloud.cfg.d/99-det-agent-image.cfg").read_text().endswith("allow_userdata: false\n")


def test_the_nvidia_step_installs_the_driver_and_checks_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    calls = run_plan(steps.plan("aws", source=steps.source_archive(), nvidia_driver=True), root, tmp_path)
    assert f"apt-get install -y -q --no-install-recommends {steps.NVIDIA_DRIVER_PACKAGE}" in calls
    assert "modprobe nvidia" in calls  # the stand-in builder has no GPU: nvidia-smi is left to GPU instances


def test_a_gcp_image_leaves_the_startup_script_to_the_unit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "lib/systemd/system/google-startup-scripts.service").write_text("[Service]\n")
    calls = run_plan(steps.plan("gcp", source=steps.source_archive()), root, tmp_path)
    assert f"systemctl --root={root} disable google-startup-scripts.service" in calls
    assert f"systemctl --root={root} enable {steps.UNIT_NAME}" in calls
    assert (root / "opt/controlplane/image.env").read_text() == "DET_IMAGE_CLOUD=gcp\n"


@pytest.mark.parametrize(("missing", "said"), [("bwrap", "bubblewrap (bwrap) is missing"),
                                                ("slirp4netns", "slirp4netns is missing")])
def test_a_base_image_without_the_sandboxs_tools_fails_the_packages_step(tmp_path: Path, missing: str,
                                                                          said: str) -> None:
    write_shims(tmp_path / "shims")
    (tmp_path / "shims" / missing).unlink()
    env = {"PATH": f"{tmp_path / 'shims'}:/nonexistent", "DET_IMAGE_ROOT": str(tmp_path / "root"),
           "DET_TEST_CALLS": str(tmp_path / "calls.log")}
    done = subprocess.run(["/bin/bash", "-c", steps.script(steps.plan("aws", source=b"")[0].command)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and said in done.stderr
