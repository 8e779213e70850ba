"""The PAI_* variables of one task, in the guide's names and formats, for its distributed example."""

from __future__ import annotations

import pytest

from controlplane.pai.env import TaskPlacement, build_env
from controlplane.pai.ports import AgentPorts, assign_ports
from controlplane.pai.spec import parse_job
from tests.controlplane.pai.guide_example import example

IPS = {"a": "10.0.0.1", "b": "10.0.0.2"}
PLACEMENT = {("ps_server", 0): "a", ("ps_server", 1): "b", ("worker", 0): "a", ("worker", 1): "b"}


def placed(raw=None):
    job = parse_job(raw or example())[0]
    ports = assign_ports(job, PLACEMENT, {k: AgentPorts(20000, 20100) for k in IPS})
    return job, {key: TaskPlacement(IPS[PLACEMENT[key]], ports[key]) for key in PLACEMENT}


def test_the_guides_example_worker_1():
    job, placements = placed()
    env = build_env(job, placements, "worker", 1, user_name="alice", default_fs_uri="hdfs://nn:9000")
    expected = {
        # job level (guide's table)
        "PAI_JOB_NAME": "tensorflow-distributed-jobguid",
        "PAI_USER_NAME": "alice",
        "PAI_DEFAULT_FS_URI": "hdfs://nn:9000",
        # task role level
        "PAI_TASK_ROLE_COUNT": "2",
        "PAI_TASK_ROLE_LIST": "ps_server,worker",
        "PAI_TASK_ROLE_TASK_COUNT_ps_server": "2",
        "PAI_TASK_ROLE_TASK_COUNT_worker": "2",
        "PAI_HOST_IP_ps_server_0": "10.0.0.1",
        "PAI_HOST_IP_ps_server_1": "10.0.0.2",
        "PAI_HOST_IP_worker_0": "10.0.0.1",
        "PAI_HOST_IP_worker_1": "10.0.0.2",
        "PAI_PORT_LIST_ps_server_0_http": "20000",
        "PAI_PORT_LIST_ps_server_0_ssh": "20001",
        "PAI_PORT_LIST_worker_1_http": "20002",
        "PAI_PORT_LIST_worker_1_ssh": "20003",
        "PAI_RESOURCE_ps_server": "0,2,8192,64",  # "gpuNumber,cpuNumber,memMB,shmMB"
        "PAI_RESOURCE_worker": "4,2,16384,64",
        "PAI_MIN_FAILED_TASK_COUNT_ps_server": "1",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_ps_server": "",  # null is written empty, as the rest-server did
        "PAI_MIN_FAILED_TASK_COUNT_worker": "1",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_worker": "2",
        # current task role and task
        "PAI_CURRENT_TASK_ROLE_NAME": "worker",
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "1",
        # the older names the example's command still uses
        "PAI_DATA_DIR": "hdfs://nn:9000/path/tensorflow-distributed-jobguid/data",
        "PAI_OUTPUT_DIR": "hdfs://nn:9000/path/tensorflow-distributed-jobguid/output",
        "PAI_CODE_DIR": "./code",
        "PAI_JOB_VC_NAME": "your_virtual_cluster",
        "PAI_TASK_ROLE_ps_server_HOST_LIST": "10.0.0.1:20000,10.0.0.2:20000",
        "PAI_TASK_ROLE_worker_HOST_LIST": "10.0.0.1:20002,10.0.0.2:20002",
        "PAI_CONTAINER_HOST_IP": "10.0.0.2",
        "PAI_CONTAINER_HOST_PORT_LIST": "http:20002;ssh:20003",
        "PAI_CONTAINER_HOST_http_PORT_LIST": "20002",
        "PAI_CONTAINER_HOST_ssh_PORT_LIST": "20003",
        "PAI_worker_1_http_PORT": "20002",
        "PAI_ps_server_0_ssh_PORT": "20001",
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": "2",
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": "2",
        "PAI_CURRENT_TASK_ROLE_MEM_MB": "16384",
        "PAI_CURRENT_TASK_ROLE_SHM_MB": "64",
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": "4",
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": "1",
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": "2",
        "PAI_JOB_TASK_COUNT": "4",
        "PAI_JOB_TASK_ROLE_COUNT": "2",
        "PAI_JOB_TASK_ROLE_LIST": "ps_server,worker",
        "PAI_TASK_INDEX": "1",
        "PAI_TASK_ROLE_NAME": "worker",
        # jobEnvs, as given
        "batch_size": "32",
        "job_model": "resnet20",
    }
    assert {k: env.get(k) for k in expected} == expected
    assert all(v.isascii() for v in env.values())


def test_container_port_list_format_with_several_labels_and_ports():
    raw = example()
    raw["taskRoles"][0]["portList"] = [{"label": "grpc", "beginAt": 0, "portNumber": 3},
                                       {"label": "http", "beginAt": 0, "portNumber": 2}]
    job, placements = placed(raw)
    env = build_env(job, placements, "ps_server", 0, user_name="u")
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "grpc:20000,20001,20002;http:20003,20004;ssh:20005"
    assert env["PAI_CONTAINER_HOST_grpc_PORT_LIST"] == "20000,20001,20002"
    assert env["PAI_PORT_LIST_ps_server_0_grpc"] == "20000,20001,20002"
    # the host list takes each task's first http port
    assert env["PAI_TASK_ROLE_ps_server_HOST_LIST"] == "10.0.0.1:20003,10.0.0.2:20003"


def test_output_dir_defaults_as_the_guide_says_and_job_envs_are_not_substituted():
    raw = example()
    del raw["outputDir"], raw["dataDir"], raw["codeDir"]
    raw["jobEnvs"] = {"X": "$PAI_JOB_NAME/$HOME"}
    job, placements = placed(raw)
    env = build_env(job, placements, "worker", 0, user_name="u", default_fs_uri="hdfs://nn:9000")
    assert env["PAI_OUTPUT_DIR"] == "hdfs://nn:9000/Output/tensorflow-distributed-jobguid"
    assert env["PAI_DATA_DIR"] == "" and env["PAI_CODE_DIR"] == ""
    assert env["X"] == "$PAI_JOB_NAME/$HOME"


def test_bad_task_or_incomplete_placements_are_refused():
    job, placements = placed()
    with pytest.raises(ValueError, match="worker has tasks 0-1, not 2"):
        build_env(job, placements, "worker", 2, user_name="u")
    with pytest.raises(KeyError):
        build_env(job, placements, "chief", 0, user_name="u")
    del placements[("ps_server", 1)]
    with pytest.raises(ValueError, match=r"ps_server\[1\] has no placement"):
        build_env(job, placements, "worker", 0, user_name="u")
