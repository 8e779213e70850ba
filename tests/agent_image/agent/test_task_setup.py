"""Task environment, command line (startup hook, quoting) and info files."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from agent_image.agent.task_setup import HOOK_GUARD, build_command, build_env, make_staging_dir, write_info_files
from agent_image.agent.tasks import exit_code_of
from controlplane.wire.agent_protocol import Slot, StartTask


def msg(**kw: object) -> StartTask:
    base: dict[str, object] = dict(
        allocation_id="t.1",
        task_id="t",
        task_type="TRIAL",
        entrypoint="python3 train.py",
        env={"DET_TRIAL_ID": "5", "DET_LATEST_CHECKPOINT": "ck-uuid", "DET_CLUSTER_ID": "c-env"},
        slot_ids=[1, 3],
        session_token="tok",
        trial_info={"trial_id": 5},
    )
    base.update(kw)
    return StartTask(**base)  # type: ignore[arg-type]


def test_env(tmp_path: Path) -> None:
    slots = [Slot(id=i, type="cuda") for i in range(4)]
    env = build_env(
        msg(), master_url="http://m:8080", cluster_id="c", agent_id="ag", slots=slots,
        info_dir=tmp_path, base={"PATH": "/usr/bin", "DET_TRIAL_ID": "old"},
    )
    assert env["DET_TRIAL_ID"] == "5"
    assert env["DET_MASTER"] == "http://m:8080" and env["DET_AGENT_ID"] == "ag"
    assert json.loads(env["DET_SLOT_IDS"]) == [1, 3]
    assert env["DET_CONTAINER_ID"] == "t.1" and env["DET_RESOURCES_TYPE"] == "local-process"
    assert env["DET_INFO_DIR"] == str(tmp_path) and env["PYTHONUNBUFFERED"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["PATH"] == os.path.dirname(sys.executable) + os.pathsep + "/usr/bin"
    assert env["DET_CLUSTER_ID"] == "c-env"  # the master's value wins
    cpu = build_env(msg(), master_url="m", cluster_id="c", agent_id="a",
                    slots=[Slot(id=i, type="cpu") for i in range(4)], info_dir=tmp_path, base={})
    assert cpu["CUDA_VISIBLE_DEVICES"] == ""


def test_command_with_and_without_hook(tmp_path: Path) -> None:
    assert build_command("echo hi", tmp_path) == ["sh", "-c", "echo hi"]
    assert build_command(["python3", "a b.py"], tmp_path) == ["python3", "a b.py"]
    (tmp_path / "startup-hook.sh").write_text("export X=1\n")
    assert build_command("echo 'hi'", tmp_path) == [
        "bash", "-c", HOOK_GUARD + "source ./startup-hook.sh && trap - EXIT && exec sh -c 'echo '\"'\"'hi'\"'\"''"]
    assert build_command(["python3", "a b.py"], tmp_path) == [
        "bash", "-c", HOOK_GUARD + "source ./startup-hook.sh && trap - EXIT && exec python3 'a b.py'"]


def test_info_files(tmp_path: Path) -> None:
    write_info_files(tmp_path / "info", msg(), "http://m", "c-reg", "ag")
    cluster = json.loads((tmp_path / "info/cluster.json").read_text())
    assert cluster == {
        "master_url": "http://m", "cluster_id": "c-env", "agent_id": "ag", "slot_ids": [1, 3],
        "task_id": "t", "allocation_id": "t.1", "session_token": "tok", "task_type": "TRIAL",
        "master_cert_name": None, "master_cert_file": None, "latest_checkpoint": "ck-uuid",
    }
    for name in ("cluster.json", "trial.json", "rendezvous.json", "ports.json"):
        assert stat.S_IMODE((tmp_path / "info" / name).stat().st_mode) == 0o600
    assert json.loads((tmp_path / "info/rendezvous.json").read_text())["container_slot_counts"] == [2]
    assert json.loads((tmp_path / "info/resources.json").read_text()) == {"gpu_uuids": []}
    gpus = [Slot(id=1, type="cuda", uuid="GPU-a"), Slot(id=2, type="cuda", uuid="GPU-b"), Slot(id=3, type="cuda",
                                                                                              uuid="GPU-c")]
    write_info_files(tmp_path / "gpu", msg(), "http://m", "c", "ag", gpus)
    # Determined's ResourcesInfo: the task's own GPUs (slots 1 and 3), which its Trial API trains on.
    assert json.loads((tmp_path / "gpu/resources.json").read_text()) == {"gpu_uuids": ["GPU-a", "GPU-c"]}
    write_info_files(tmp_path / "i2", msg(trial_info=None), "http://m", "c", "ag")
    assert not (tmp_path / "i2/trial.json").exists()


def test_exit_code_of_signals() -> None:
    assert exit_code_of(3) == 3 and exit_code_of(-15) == 143 and exit_code_of(-9) == 137


def test_rendezvous_file_is_determineds_and_the_masters_ports_and_ssh_key_are_beside_it(tmp_path: Path) -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"
    m = msg(rank=1, container_addrs=["10.0.0.1", "10.0.0.2"], container_slot_counts=[2, 2], chief_port=21000,
            dist_ports=[21001, 21002], ssh_ports=[0, 21003], ssh_key=key)
    write_info_files(tmp_path / "info", m, "http://m", "c", "ag")
    # Exactly Determined's keys: its harness builds RendezvousInfo(**json) and fails on any other.
    assert json.loads((tmp_path / "info/rendezvous.json").read_text()) == {
        "container_addrs": ["10.0.0.1", "10.0.0.2"], "container_rank": 1, "container_slot_counts": [2, 2]}
    assert json.loads((tmp_path / "info/ports.json").read_text()) == {
        "chief_port": 21000, "dist_ports": [21001, 21002], "ssh_ports": [0, 21003],
        "ssh_key_file": "ssh/id_ed25519", "ssh_host_key_file": None}
    key_file = tmp_path / "info/ssh/id_ed25519"
    assert key_file.read_text() == key + "\n" and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    write_info_files(tmp_path / "pai", msg(ssh_key=key, ssh_host_key=key.replace("abc", "host")), "http://m", "c", "ag")
    assert json.loads((tmp_path / "pai/ports.json").read_text())["ssh_host_key_file"] == "ssh/host_ed25519"
    host_key = tmp_path / "pai/ssh/host_ed25519"  # an OpenPAI task's own SSH server's key: private too
    assert "host" in host_key.read_text() and stat.S_IMODE(host_key.stat().st_mode) == 0o600
    write_info_files(tmp_path / "single", msg(), "http://m", "c", "ag")
    assert json.loads((tmp_path / "single/ports.json").read_text())["ssh_key_file"] is None
    assert not (tmp_path / "single/ssh").exists()


def test_legacy_trial_entrypoint_runs_the_harness_or_the_torch_launcher(tmp_path: Path) -> None:
    harness = ["python3", "-m", "controlplane.exec.harness", "model_def:MyTrial"]
    assert build_command("model_def:MyTrial", tmp_path) == harness
    assert build_command("model_def:MyTrial", tmp_path, slots_per_trial=1) == harness
    assert build_command(" pkg.model_def:MyTrial ", tmp_path, slots_per_trial=0) == [
        "python3", "-m", "controlplane.exec.harness", "pkg.model_def:MyTrial"]
    assert build_command("model_def:MyTrial", tmp_path, slots_per_trial=4) == [
        "python3", "-m", "launchers.torch_distributed", "--trial", "model_def:MyTrial"]
    # Anything else is a shell command, as before.
    for command in ("python3 train.py", "echo a:b", "model_def:My Trial", "model-def:MyTrial", "a:b:c", "./x:Y",
                    "model_def:", ":MyTrial", "1model:MyTrial"):
        assert build_command(command, tmp_path, slots_per_trial=4) == ["sh", "-c", command], command
    assert build_command(["model_def:MyTrial"], tmp_path) == ["model_def:MyTrial"]  # a list is exec'd as is
    (tmp_path / "startup-hook.sh").write_text("export X=1\n")
    assert build_command("model_def:MyTrial", tmp_path, slots_per_trial=2) == [
        "bash", "-c",
        HOOK_GUARD + "source ./startup-hook.sh && trap - EXIT && "
        "exec python3 -m launchers.torch_distributed --trial model_def:MyTrial"]
    # Where Determined's own package is installed, its 0.38.1 exec/launch.py choice: its torch launcher.
    assert build_command("model_def:MyTrial", tmp_path, slots_per_trial=1, determined_harness=True) == [
        "bash", "-c",
        HOOK_GUARD + "source ./startup-hook.sh && trap - EXIT && "
        "exec python3 -m determined.launch.torch_distributed --trial model_def:MyTrial"]


def test_a_staging_dir_another_agent_creates_at_the_same_moment_is_used(tmp_path, monkeypatch):
    """Two agents of one machine start a gang's ranks together: each finds the allocation's shared_fs
    staging directory missing and creates it; the one that comes second must go on (EEXIST failed the gang)."""
    staging = tmp_path / "checkpoints" / ".staging" / "alloc-1"
    real_mkdir = Path.mkdir

    def other_agent_first(self: Path, *args: object, **kwargs: object) -> None:
        if self in (staging, staging.parent) and not self.exists():
            real_mkdir(self, parents=True)  # the other agent wins the race
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", other_agent_first)
    make_staging_dir(staging, None)
    assert staging.is_dir()


def test_only_the_allocations_staging_dir_is_given_to_the_tasks_user(tmp_path, monkeypatch):
    chowned: list[tuple[str, int, int]] = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid: chowned.append((str(path), uid, gid)))
    staging = tmp_path / "ckpts" / ".staging" / "alloc-1"
    make_staging_dir(staging, (65534, 65534))
    make_staging_dir(staging, (65534, 65534), ["by/storage_path"])  # where read-only checkpoints are mounted
    assert set(chowned) == {(str(p), 65534, 65534) for p in (staging, staging / "by", staging / "by" / "storage_path")}
    assert staging.parent.stat().st_mode & 0o777 == 0o700  # no other user lists what is staged


def test_determineds_harness_broadcasts_on_the_allocations_own_ports(tmp_path: Path) -> None:
    """Determined's core.DistributedContext binds fixed ports 12360/12376 unless told otherwise:
    two 2-slot trials on one host met each other's workers. Each allocation's reserved pair is used."""
    slots = [Slot(id=i, type="cpu") for i in range(4)]
    first, second = (build_env(msg(chief_port=c10d, dist_ports=dist), master_url="http://m", cluster_id="c",
                               agent_id="ag", slots=slots, info_dir=tmp_path, base={"PATH": "/usr/bin"})
                     for c10d, dist in ((21000, [21001, 21002]), (21010, [21011, 21012])))
    assert (first["INTER_TRAIN_PROCESS_COMM_PORT_1"], first["INTER_TRAIN_PROCESS_COMM_PORT_2"]) == ("21001", "21002")
    assert (second["INTER_TRAIN_PROCESS_COMM_PORT_1"], second["INTER_TRAIN_PROCESS_COMM_PORT_2"]) == ("21011", "21012")
    alone = build_env(msg(), master_url="http://m", cluster_id="c", agent_id="ag", slots=slots, info_dir=tmp_path,
                      base={"PATH": "/usr/bin"})
    assert "INTER_TRAIN_PROCESS_COMM_PORT_1" not in alone  # no gang ports: Determined's defaults


def test_the_platforms_task_wrapper_runs_under_the_agents_interpreter(tmp_path):
    """`python3 -m controlplane.exec.pai_task CMD` (every OpenPAI task, command, shell, notebook):
    the agent's interpreter, which has the package, whatever environment's python3 is on PATH;
    the user's own `python3 -m ...` is left to PATH."""
    import sys

    wrapped = build_command(["python3", "-m", "controlplane.exec.pai_task", "--", "python3 -V"], tmp_path)
    assert wrapped == [sys.executable, "-m", "controlplane.exec.pai_task", "--", "python3 -V"]
    assert build_command(["python3", "-m", "http.server"], tmp_path) == ["python3", "-m", "http.server"]


def test_determineds_launcher_names_run_this_projects_launchers_unless_determined_is_installed(tmp_path: Path):
    seed = "python3 -m determined.launch.torch_distributed --trial model_def:MyTrial"
    assert build_command(seed, tmp_path, slots_per_trial=2) == [
        "sh", "-c", "python3 -m launchers.torch_distributed --trial model_def:MyTrial"]
    assert build_command(seed, tmp_path, slots_per_trial=2, determined_harness=True) == ["sh", "-c", seed]
    assert build_command(["python3", "-m", "determined.launch.deepspeed", "python3", "train.py"], tmp_path) == [
        "python3", "-m", "launchers.deepspeed", "python3", "train.py"]
    # Horovod's for a gang, none for one slot (Determined's autohorovod); wrap_rank and horovod by name.
    auto = "python3 -m determined.launch.autohorovod train.py"
    assert build_command(auto, tmp_path, slots_per_trial=4)[-1] == "python3 -m launchers.horovod train.py"
    assert build_command(auto, tmp_path, slots_per_trial=1)[-1] == "python3 -m launchers.torch_distributed train.py"
    assert build_command("pip install x && python3 -m determined.launch.wrap_rank RANK -- python3 a.py",
                         tmp_path)[-1] == "pip install x && python3 -m launchers.wrap_rank RANK -- python3 a.py"
    assert build_command("echo determined.launch.horovod", tmp_path)[-1] == "echo determined.launch.horovod"


def test_determineds_own_environment_resumes_with_torchs_old_load_default(tmp_path: Path) -> None:
    """0.38.1's Trainer restores with torch.load's pre-2.6 default: a paused or preempted
    PyTorchTrial in Determined's environment must resume on torch 2.13; others are left as they are."""
    from agent_image.agent.environments import TaskEnvironment

    determined = TaskEnvironment(name="determined-0.38.1", python=Path(sys.executable),
                                 bin_dir=Path(sys.executable).parent, virtual_env=None, determined_harness=True)
    kw = dict(master_url="m", cluster_id="c", agent_id="a", slots=[Slot(id=0, type="cpu")], info_dir=tmp_path)
    assert build_env(msg(), base={}, environment=determined, **kw)["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in build_env(msg(), base={}, **kw)
    chosen = build_env(msg(), base={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "0"}, environment=determined, **kw)
    assert chosen["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "0"  # the user's own setting wins
