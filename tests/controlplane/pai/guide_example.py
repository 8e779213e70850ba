"""The guide's distributed TensorFlow example (microsoft/pai docs/job_tutorial.md at 0db059b), comments
dropped, codeDir a local directory (this cluster has no HDFS)."""

from __future__ import annotations

import copy
from typing import Any

_PORTS = [{"label": "http", "beginAt": 0, "portNumber": 1}, {"label": "ssh", "beginAt": 0, "portNumber": 1}]
_CMD = ("pip --quiet install scipy && python code/tf_cnn_benchmarks.py --local_parameter_device=cpu "
        "--batch_size=$batch_size --model=$job_model --variable_update=parameter_server --data_dir=$PAI_DATA_DIR "
        "--data_name=cifar10 --train_dir=$PAI_OUTPUT_DIR --ps_hosts=$PAI_TASK_ROLE_ps_server_HOST_LIST "
        "--worker_hosts=$PAI_TASK_ROLE_worker_HOST_LIST --job_name={} "
        "--task_index=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX")

EXAMPLE: dict[str, Any] = {
    "jobName": "tensorflow-distributed-jobguid",
    "image": "your_docker_registry/pai.run.tensorflow",
    "dataDir": "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/data",
    "outputDir": "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/output",
    "codeDir": "./code",
    "virtualCluster": "your_virtual_cluster",
    "taskRoles": [
        {"name": "ps_server", "taskNumber": 2, "cpuNumber": 2, "memoryMB": 8192, "gpuNumber": 0,
         "portList": _PORTS, "command": _CMD.format("ps")},
        {"name": "worker", "taskNumber": 2, "cpuNumber": 2, "memoryMB": 16384, "gpuNumber": 4,
         "portList": _PORTS, "command": _CMD.format("worker"), "minSucceededTaskCount": 2},
    ],
    "retryCount": 0,
    "jobEnvs": {"batch_size": 32, "job_model": "resnet20"},
    "extras": {},
}


def example() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE)
