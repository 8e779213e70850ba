"""Every field rule of the guide's job table, and ours (bounds, codeDir, jobEnvs), names field and rule."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.pai import spec
from controlplane.pai.spec import PaiJobError, PortType, parse_job
from tests.controlplane.pai.guide_example import example


def errors_of(raw: Any) -> list[str]:
    with pytest.raises(PaiJobError) as info:
        parse_job(raw)
    return [str(e) for e in info.value.errors]


def with_job(**fields: Any) -> dict:
    raw = example()
    for key, value in fields.items():
        if value is ...:
            del raw[key]
        else:
            raw[key] = value
    return raw


def with_role(index: int = 0, **fields: Any) -> dict:
    raw = example()
    for key, value in fields.items():
        if value is ...:
            del raw["taskRoles"][index][key]
        else:
            raw["taskRoles"][index][key] = value
    return raw


def test_the_guides_example_parses_with_its_defaults():
    job, warnings = parse_job(example())
    # its outputDir is a name only: the tasks write to $PAI_OUTPUT_DIR, kept in checkpoint storage
    assert warnings == ["outputDir: '$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/output' is a name "
                        "only here: each task writes to $PAI_OUTPUT_DIR, a directory of its own, and what it holds "
                        "when the task ends is kept under the job in the cluster's checkpoint storage, at "
                        "$PAI_DEFAULT_FS_URI (det pai output JOB)"]
    assert job.job_name == "tensorflow-distributed-jobguid"
    assert job.virtual_cluster == "your_virtual_cluster"
    assert job.retry_count == 0 and job.total_tasks == 4
    ps, worker = job.task_roles
    assert (ps.name, ps.task_number, ps.cpu_number, ps.memory_mb, ps.gpu_number) == ("ps_server", 2, 2, 8192, 0)
    assert ps.shm_mb == 64  # the guide's default
    assert ps.min_failed_task_count == 1 and ps.min_succeeded_task_count is None  # rest-server defaults
    assert worker.min_succeeded_task_count == 2
    assert ps.port_list == (PortType("http", 0, 1), PortType("ssh", 0, 1))
    assert dict(job.job_envs) == {"batch_size": "32", "job_model": "resnet20"}


def test_a_minimal_job_gets_defaults_and_http_ssh_ports():
    job, _ = parse_job({"jobName": "j", "image": "busybox", "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 100, "gpuNumber": 0, "command": "true"}]})
    assert job.virtual_cluster == "default" and job.retry_count == 0 and job.code_dir is None
    assert job.task_roles[0].ports == (PortType("http", 0, 1), PortType("ssh", 0, 1))
    assert dict(job.job_envs) == {} and dict(job.extras) == {}


def test_declared_http_is_kept_and_ssh_added():
    job, _ = parse_job(with_role(portList=[{"label": "http", "beginAt": 8080, "portNumber": 2}]))
    assert job.task_roles[0].ports == (PortType("http", 8080, 2), PortType("ssh", 0, 1))


def test_the_job_is_frozen():
    job, _ = parse_job(example())
    with pytest.raises(AttributeError):
        job.job_name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        job.job_envs["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize("raw, expected", [
    # jobName
    (with_job(jobName=...), "jobName: required, can not be empty"),
    (with_job(jobName="a b"), r"jobName: must match ^[A-Za-z0-9\-._~]+$"),
    (with_job(jobName="job\n"), r"jobName: must match ^[A-Za-z0-9\-._~]+$"),
    (with_job(jobName="x" * 129), "jobName: at most 128 characters, got 129"),
    (with_job(jobName=5), "jobName: must be a string, got int"),
    # image
    (with_job(image=...), "image: required, can not be empty"),
    (with_job(image=""), "image: required, can not be empty"),
    (with_job(image="a b"), "image: must not contain whitespace"),
    # paths
    (with_job(dataDir="x" * 4097), "dataDir: at most 4096 characters, got 4097"),
    (with_job(outputDir=["a"]), "outputDir: must be a string, got list"),
    (with_job(codeDir="hdfs://nn:9000/code"), "codeDir: HDFS URIs are not supported here (no HDFS): give a "
                                              "local directory, which the client uploads with the job "
                                              "(at most 200 MB, OpenPAI's limit)"),
    (with_job(codeDir="$PAI_DEFAULT_FS_URI/path/code"), "codeDir: HDFS URIs are not supported"),
    (with_job(codeDir="s3://bucket/code"), "codeDir: must be a local directory path, not a URI"),
    (with_job(virtualCluster="v" * 129), "virtualCluster: at most 128 characters"),
    (with_job(gpuType=3), "gpuType: must be a string, got int"),
    # retryCount
    (with_job(retryCount=-1), "retryCount: no less than 0"),
    (with_job(retryCount=101), "retryCount: at most 100, got 101"),
    (with_job(retryCount=1.5), "retryCount: must be an integer, got 1.5"),
    (with_job(retryCount=True), "retryCount: must be an integer, got True"),
    # taskRoles
    (with_job(taskRoles=...), "taskRoles: required, one task role at least"),
    (with_job(taskRoles=[]), "taskRoles: one task role at least"),
    (with_job(taskRoles={}), "taskRoles: must be a list, got dict"),
    (with_job(taskRoles=[dict(example()["taskRoles"][0], name=f"r{i}") for i in range(17)]),
     "taskRoles: at most 16 task roles, got 17"),
    (with_job(taskRoles=["x"]), "taskRoles[0]: must be an object, got str"),
    # taskRole.name
    (with_role(name=...), "taskRoles[0].name: required, can not be empty"),
    (with_role(name="ps\n"), "taskRoles[0].name: must match ^[A-Za-z0-9._~]+$"),
    (with_role(name="ps-server"), "taskRoles[0].name: must match ^[A-Za-z0-9._~]+$"),
    (with_role(1, name="ps_server"), "taskRoles[1].name: need to be unique with other roles: 'ps_server' repeats"),
    (with_role(name="n" * 65), "taskRoles[0].name: at most 64 characters, got 65"),
    # taskNumber / cpuNumber / memoryMB / shmMB / gpuNumber
    (with_role(taskNumber=...), "taskRoles[0].taskNumber: required"),
    (with_role(taskNumber=0), "taskRoles[0].taskNumber: no less than 1"),
    (with_role(taskNumber=1025), "taskRoles[0].taskNumber: at most 1024, got 1025"),
    (with_role(cpuNumber=0), "taskRoles[0].cpuNumber: no less than 1"),
    (with_role(cpuNumber=...), "taskRoles[0].cpuNumber: required"),
    (with_role(memoryMB=99), "taskRoles[0].memoryMB: no less than 100"),
    (with_role(memoryMB="8G"), "taskRoles[0].memoryMB: must be an integer, got '8G'"),
    (with_role(shmMB=8193), "taskRoles[0].shmMB: no more than memory size (8192), got 8193"),
    (with_role(shmMB=-1), "taskRoles[0].shmMB: no less than 0"),
    (with_role(gpuNumber=-1), "taskRoles[0].gpuNumber: no less than 0"),
    (with_role(gpuNumber=...), "taskRoles[0].gpuNumber: required"),
    (with_role(gpuNumber=65), "taskRoles[0].gpuNumber: at most 64, got 65"),
    # command
    (with_role(command=...), "taskRoles[0].command: required, can not be empty"),
    (with_role(command="   "), "taskRoles[0].command: can not be empty"),
    (with_role(command="x" * (64 * 1024 + 1)), "taskRoles[0].command: at most 65536 characters"),
    (with_role(command="echo \x07"), "taskRoles[0].command: must not contain control characters"),
    # minFailedTaskCount / minSucceededTaskCount
    (with_role(minFailedTaskCount=0), "taskRoles[0].minFailedTaskCount: null or no less than 1"),
    (with_role(minFailedTaskCount=-1), "taskRoles[0].minFailedTaskCount: null or no less than 1"),
    (with_role(minFailedTaskCount=3), "taskRoles[0].minFailedTaskCount: should not be greater than taskNumber (2)"),
    (with_role(minSucceededTaskCount=0), "taskRoles[0].minSucceededTaskCount: null or no less than 1"),
    (with_role(1, minSucceededTaskCount=3),
     "taskRoles[1].minSucceededTaskCount: should not be greater than taskNumber (2), got 3"),
    # unknown and obsolete fields
    (with_job(jobname="x"), "jobname: unknown field (allowed: jobName, image,"),
    (with_role(memory=1), "taskRoles[0].memory: unknown field"),
    (with_job(killAllOnCompletedTaskNumber=1),
     "killAllOnCompletedTaskNumber: obsolete: use taskRoles[].minFailedTaskCount and minSucceededTaskCount"),
])
def test_each_rule_names_field_and_rule(raw, expected):
    assert any(e.startswith(expected) for e in errors_of(raw)), errors_of(raw)


def test_default_shm_fits_the_least_memory():
    assert parse_job(with_role(memoryMB=100))[0].task_roles[0].shm_mb == 64


def test_total_tasks_are_capped():
    raw = with_role(taskNumber=600)
    raw["taskRoles"][1]["taskNumber"] = 600
    assert "taskRoles: at most 1024 tasks in all, got 1200" in errors_of(raw)


@pytest.mark.parametrize("ports, expected", [
    ([{"label": "a b", "beginAt": 0, "portNumber": 1}], "portList[0].label: must match ^[A-Za-z0-9._~]+$"),
    ([{"beginAt": 0, "portNumber": 1}], "portList[0].label: required, can not be empty"),
    ([{"label": "a", "portNumber": 1}], "portList[0].beginAt: required"),
    ([{"label": "a", "beginAt": -1, "portNumber": 1}], "portList[0].beginAt: no less than 0 (0 for random selection)"),
    ([{"label": "a", "beginAt": 70000, "portNumber": 1}], "portList[0].beginAt: at most 65535, got 70000"),
    ([{"label": "a", "beginAt": 65535, "portNumber": 2}], "portList[0].beginAt: beginAt + portNumber - 1 must be"),
    ([{"label": "a", "beginAt": 0}], "portList[0].portNumber: required"),
    ([{"label": "a", "beginAt": 0, "portNumber": 0}], "portList[0].portNumber: no less than 1"),
    ([{"label": "a", "beginAt": 0, "portNumber": 65}], "portList[0].portNumber: at most 64, got 65"),
    ([{"label": "a", "beginAt": 0, "portNumber": 1, "proto": "tcp"}], "portList[0].proto: unknown field"),
    ([{"label": "a", "beginAt": 0, "portNumber": 1}] * 2, "portList[1].label: must be unique in the role: 'a'"),
    ([{"label": "a", "beginAt": 9000, "portNumber": 3}, {"label": "b", "beginAt": 9002, "portNumber": 1}],
     "portList[1].beginAt: overlaps the ports of port type 'a'"),
    ([{"label": f"p{i}", "beginAt": 0, "portNumber": 1} for i in range(17)], "portList: at most 16 port types"),
    ("http", "portList: must be a list, got str"),
    (["http"], "portList[0]: must be an object, got str"),
])
def test_port_list_rules(ports, expected):
    assert any(e.startswith(f"taskRoles[0].{expected}") for e in errors_of(with_role(portList=ports)))


def test_null_min_counts_turn_the_rules_off():
    job, _ = parse_job(with_role(minFailedTaskCount=None, minSucceededTaskCount=None))
    assert job.task_roles[0].min_failed_task_count is None
    assert job.task_roles[0].min_succeeded_task_count is None


def test_every_error_is_collected_in_one_answer():
    raw = with_job(jobName="bad name", image=..., retryCount=-3)
    raw["taskRoles"][0].update(memoryMB=1, cpuNumber=0)
    raw["taskRoles"][1].update(name="bad/name", extra=1)
    errors = errors_of(raw)
    for expected in ("jobName: must match", "image: required", "retryCount: no less than 0",
                     "taskRoles[0].memoryMB: no less than 100", "taskRoles[0].cpuNumber: no less than 1",
                     "taskRoles[1].name: must match", "taskRoles[1].extra: unknown field"):
        assert any(e.startswith(expected) for e in errors), (expected, errors)


def test_auth_file_is_accepted_with_a_warning():
    job, warnings = parse_job(with_job(authFile="hdfs://nn/auth", outputDir=...))
    assert job.auth_file == "hdfs://nn/auth"
    assert warnings == ["authFile: not used: no image is pulled; 'image' names a task environment the agents "
                        "already offer (det agent list)"]


def test_code_dir_as_a_local_path_is_accepted():
    assert parse_job(with_job(codeDir="/home/me/project"))[0].code_dir == "/home/me/project"
    assert parse_job(with_job(codeDir="src"))[0].code_dir == "src"


def test_job_envs_are_strings_without_substitution():
    envs = {"A": "$HOME/x", "B": 7, "C": True, "paiAzRDMA": False}
    job, warnings = parse_job(with_job(jobEnvs=envs, outputDir=...))
    assert dict(job.job_envs) == {"A": "$HOME/x", "B": "7", "C": "true", "paiAzRDMA": "false"}
    assert warnings == ["jobEnvs.paiAzRDMA: passed as a plain variable; Azure RDMA is not supported"]


@pytest.mark.parametrize("envs, expected", [
    ({"PAI_JOB_NAME": "x"}, "jobEnvs.PAI_JOB_NAME: PAI_* names are the system's: choose another name"),
    ({"pai_x": "x"}, "jobEnvs.pai_x: PAI_* names are the system's"),
    ({"1X": "x"}, "jobEnvs.1X: name must match ^[A-Za-z_][A-Za-z0-9_]*$"),
    ({"A-B": "x"}, "jobEnvs.A-B: name must match"),
    ({"A\n": "x"}, "jobEnvs.A\n: name must match"),
    ({"A": 1.5}, "jobEnvs.A: must be a string, integer or boolean, got float"),
    ({"A": None}, "jobEnvs.A: must be a string, integer or boolean, got NoneType"),
    ({"A": {"b": 1}}, "jobEnvs.A: must be a string, integer or boolean, got dict"),
    ({"A": "x" * (32 * 1024 + 1)}, "jobEnvs.A: at most 32768 characters"),
    ({"A": "a\nb"}, "jobEnvs.A: must not contain NUL or newline"),
    ({f"V{i}": "x" for i in range(257)}, "jobEnvs: at most 256 variables, got 257"),
    (["A"], "jobEnvs: must be an object, got list"),
])
def test_job_envs_rules(envs, expected):
    assert any(e.startswith(expected) for e in errors_of(with_job(jobEnvs=envs))), errors_of(with_job(jobEnvs=envs))


def test_extras_are_plain_bounded_json():
    job, _ = parse_job(with_job(extras={"k": [1, "two", {"three": None}]}))
    assert job.extras["k"] == [1, "two", {"three": None}]
    assert errors_of(with_job(extras="x")) == ["extras: must be an object, got str"]
    assert any("over the 65536-byte limit" in e for e in errors_of(with_job(extras={"k": "x" * 70000})))


def test_not_an_object_or_hostile_shapes_are_refused_whole():
    assert errors_of([1]) == ["the job must be a JSON object, got list"]
    assert any("must be a finite number" in e for e in errors_of(with_job(extras={"x": float("nan")})))
    deep: dict = {}
    node = deep
    for _ in range(20):
        node["a"] = {}
        node = node["a"]
    assert any("nested more than 16 levels deep" in e for e in errors_of(with_job(extras=deep)))
    assert any("over the 1048576-byte limit" in e for e in errors_of(with_job(image="x" * (1024 * 1024 + 1))))


def test_limits_are_the_documented_ones():
    assert spec.MAX_TOTAL_TASKS == 1024 and spec.DEFAULT_SHM_MB == 64
