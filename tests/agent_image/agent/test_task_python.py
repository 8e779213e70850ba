"""A task's own Python packages (``agent_image/agent/task_python.py``): ``pip install`` in a startup
hook into the task's layer, environment.pip_requirements installed once per experiment and shared
read-only, and a failed install or startup hook reported as a failed setup (not to be restarted)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
from pathlib import Path

from agent_image.agent import task_python
from agent_image.agent.environments import default_environment
from agent_image.agent.task_setup import build_command
from controlplane.wire.agent_protocol import StartTask, TaskExited
from tests.support.tiny_wheel import wheel

from .conftest import AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of

ENV = default_environment()
SITE = f"{task_python.TASK_LAYER}/{ENV.layer_libs[0]}"
REQ_SITE = f"{task_python.REQUIREMENTS_LAYER}/{ENV.layer_libs[0]}"


def test_the_task_env_puts_its_layers_first() -> None:
    env = {"PATH": "/env/bin:/usr/bin", "PYTHONPATH": "/mine"}
    task_python.task_env(env, ENV, task_python.TASK_LAYER, None)
    assert env["PATH"] == f"{task_python.TASK_LAYER}/bin:/env/bin:/usr/bin"
    assert env["PYTHONPATH"].split(":")[0] == SITE and env["PYTHONPATH"].endswith(":/mine")
    assert env["PIP_PREFIX"] == env["PYTHONUSERBASE"] == task_python.TASK_LAYER
    assert env["DET_SETUP_FAILED_FILE"] == f"{task_python.TASK_LAYER}/{task_python.SETUP_FAILED_NAME}"
    both = {"PATH": "/usr/bin", "PIP_PREFIX": "/theirs"}
    task_python.task_env(both, ENV, task_python.TASK_LAYER, task_python.REQUIREMENTS_LAYER)
    assert both["PATH"] == f"{task_python.TASK_LAYER}/bin:{task_python.REQUIREMENTS_LAYER}/bin:/usr/bin"
    assert both["PYTHONPATH"].split(":")[-1] == REQ_SITE  # behind the task's own
    assert both["PIP_PREFIX"] == "/theirs"  # a job's own setting stays
    install = task_python.install_env(both, task_python.REQUIREMENTS_LAYER)
    assert "PIP_PREFIX" not in install and install["PATH"].startswith(f"{task_python.REQUIREMENTS_LAYER}/bin:")


def test_a_failing_startup_hook_leaves_its_mark_and_a_failing_entrypoint_does_not(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "startup-hook.sh").write_text('[ -z "$FAIL" ] || exit "$FAIL"\n')
    mark = tmp_path / "failed"
    for fail, entry, code, marked in (("", "exit 3", 3, False), ("4", "exit 0", 4, True), ("", "exit 0", 0, False)):
        mark.unlink(missing_ok=True)
        argv = build_command(entry, tmp_path)
        done = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "FAIL": fail, "DET_SETUP_FAILED_FILE": str(mark)})
        assert (done.returncode, mark.exists()) == (code, marked), (fail, entry)


def test_requirement_layers_are_shared_within_one_experiment_only() -> None:
    def key(**env: str) -> str:
        msg = StartTask("a1", "t1", "TRIAL", "x", {"DET_USER": "ann", "DET_EXPERIMENT_ID": "3", **env}, [], "tok",
                        context_hash="ctx", pip_requirements=["numpy==2.0"])
        return task_python.requirements_key(msg, ENV, "cluster")

    first = key()
    assert key() == first
    assert key(DET_USER="bob") != first and key(DET_EXPERIMENT_ID="4") != first
    assert key(PIP_INDEX_URL="http://elsewhere") != first


async def test_a_build_is_waited_for_and_a_kill_ends_the_wait(tmp_path: Path) -> None:
    layers = task_python.RequirementLayers(tmp_path / "layers")
    first, second, third = asyncio.Event(), asyncio.Event(), asyncio.Event()
    async with layers.building("k", first) as building:
        assert building
        waiter = asyncio.create_task(_enter(layers, second))
        killed = asyncio.create_task(_enter(layers, third))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        third.set()  # killed while it waits: it stops waiting, holding nothing
        assert await asyncio.wait_for(killed, 5) is False
    assert await asyncio.wait_for(waiter, 5) is True


async def _enter(layers: task_python.RequirementLayers, stop: asyncio.Event) -> bool:
    async with layers.building("k", stop) as building:
        return building


def test_unused_layers_beyond_the_limit_go_least_recent_first(tmp_path: Path) -> None:
    layers = task_python.RequirementLayers(tmp_path / "layers", keep=1)
    for i, key in enumerate(("old", "held", "new")):
        layers.fresh(key)
        layers.complete(key)
        os.utime(tmp_path / "layers" / key / "complete", (1000 + i, 1000 + i))
    layers.hold("held")
    layers.release("new")  # the most recent; "held" is in use, "old" goes
    assert sorted(p.name for p in (tmp_path / "layers").iterdir()) == ["held", "new"]


# -- in the real sandbox ---------------------------------------------------------------------------

HOOK = """\
if [ -n "$FAIL_HOOK" ]; then
  pip install --no-index does-not-exist-anywhere
elif [ -n "$RUN_HOOK" ]; then
  pip install --no-index --find-links ./wheels tinypkg==2.0 &&
  pip install --user --no-index --find-links ./wheels otherpkg &&
  python3 -m pip install --quiet --no-index --find-links ./wheels thirdpkg
fi
"""
RUN_PY = """\
import json, os, subprocess, tinypkg
out = {"tinypkg": tinypkg.VERSION, "at": tinypkg.__file__,
       "shared_writable": os.access("/run/determined/pip-requirements", os.W_OK)}
if os.environ.get("RUN_HOOK"):
    import otherpkg, thirdpkg
    out.update(other=otherpkg.__file__, third=thirdpkg.__file__,
               cli=subprocess.run(["tinypkg-cli"], capture_output=True, text=True).stdout.strip())
print("REPORT " + json.dumps(out))
"""
REQUIREMENTS = ["--no-index", "--find-links ./wheels", "tinypkg==1.0"]


def context() -> bytes:
    files = {"startup-hook.sh": HOOK.encode(), "run.py": RUN_PY.encode()}
    for name, version in (("tinypkg", "1.0"), ("tinypkg", "2.0"), ("otherpkg", "1.0"), ("thirdpkg", "1.0")):
        file_name, data = wheel(name, version)
        files[f"wheels/{file_name}"] = data
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def task(master: FakeMaster, alloc: str, requirements: list[str], **env: str) -> StartTask:
    master.contexts["t-pip"] = ("tok", context())
    return StartTask(allocation_id=alloc, task_id="t-pip", task_type="TRIAL", entrypoint=["python3", "run.py"],
                     env={"DET_EXPERIMENT_ID": "3", "DET_USER": "ann", "PIP_NO_INDEX": "1", **env}, slot_ids=[0],
                     session_token="tok", context_hash="ctx-pip", pip_requirements=requirements)


async def run(master: FakeMaster, msg: StartTask) -> tuple[TaskExited, list[str]]:
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, msg.allocation_id), timeout=90)
    return done, [ln.message for ln in lines_of(master, msg.allocation_id)]


def report(lines: list[str]) -> dict:
    return json.loads(next(m for m in lines if m.startswith("REPORT "))[len("REPORT "):])


async def test_jobs_install_packages_of_their_own_in_the_sandbox(master: FakeMaster,
                                                                 start_agent: AgentFactory) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)

    # pip_requirements first (tinypkg 1.0), then the hook: pip over it (2.0), --user, python3 -m pip.
    done, lines = await run(master, task(master, "p1", REQUIREMENTS, RUN_HOOK="1"))
    assert (done.exit_code, done.setup_failed) == (0, False), "\n".join(lines)
    assert any("installing 3 requirement(s)" in m for m in lines) and any("Successfully installed" in m for m in lines)
    got = report(lines)
    assert got["tinypkg"] == "2.0" and got["at"].startswith(task_python.TASK_LAYER + "/") and got["cli"] == "2.0"
    assert got["other"].startswith(task_python.TASK_LAYER + "/") and got["third"].startswith(task_python.TASK_LAYER)

    # The next trial of the experiment mounts that layer read-only: nothing installed again.
    done, lines = await run(master, task(master, "p2", REQUIREMENTS))
    assert done.exit_code == 0, "\n".join(lines)
    assert any("using the layer an earlier task" in m for m in lines) and not any("Processing" in m for m in lines)
    got = report(lines)
    assert got["tinypkg"] == "1.0" and got["at"].startswith(task_python.REQUIREMENTS_LAYER + "/")
    assert got["shared_writable"] is False

    # A requirement that does not install: pip's message, and a failed setup.
    done, lines = await run(master, task(master, "p3", ["--no-index", "does-not-exist-anywhere"]))
    assert (done.exit_code, done.setup_failed) == (1, True), done
    assert "pip_requirements failed to install" in done.reason
    assert any("No matching distribution found for does-not-exist-anywhere" in m for m in lines), "\n".join(lines)

    # A startup hook whose install fails: the same, with pip's message.
    done, lines = await run(master, task(master, "p4", [], FAIL_HOOK="1"))
    assert (done.exit_code, done.setup_failed) == (1, True), done
    assert "startup-hook.sh failed" in done.reason
    assert any("No matching distribution found for does-not-exist-anywhere" in m for m in lines), "\n".join(lines)
