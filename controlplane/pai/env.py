"""Every ``PAI_*`` variable one task of a placed job sees, in OpenPAI's names and formats.

Sources, microsoft/pai:
- ``docs/job_tutorial.md`` at 0db059b215d497ca09fd9974cd7bc668f7090b5c, "Environment variables":
  PAI_JOB_NAME, PAI_USER_NAME, PAI_DEFAULT_FS_URI, PAI_TASK_ROLE_COUNT, PAI_TASK_ROLE_LIST,
  PAI_TASK_ROLE_TASK_COUNT_<role>, PAI_HOST_IP_<role>_<index>, PAI_PORT_LIST_<role>_<index>_<label>,
  PAI_RESOURCE_<role> ("gpuNumber,cpuNumber,memMB,shmMB"), PAI_MIN_FAILED_TASK_COUNT_<role>,
  PAI_MIN_SUCCEEDED_TASK_COUNT_<role>, PAI_CURRENT_TASK_ROLE_NAME,
  PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX.
- the same file at 266aee651546704f5ea06a522cb593fc3b5c0ece (before #2149 renamed them; the
  rest-server kept exporting them "for backward compatibility", and the guide's own example command
  still reads PAI_DATA_DIR, PAI_OUTPUT_DIR and PAI_TASK_ROLE_<name>_HOST_LIST): PAI_JOB_VC_NAME,
  PAI_DATA_DIR, PAI_OUTPUT_DIR, PAI_CODE_DIR, PAI_CURRENT_TASK_ROLE_{TASK_COUNT,CPU_COUNT,MEM_MB,
  SHM_MB,GPU_COUNT,MIN_FAILED_TASK_COUNT,MIN_SUCCEEDED_TASK_COUNT}, PAI_JOB_TASK_COUNT,
  PAI_JOB_TASK_ROLE_COUNT, PAI_JOB_TASK_ROLE_LIST, PAI_CONTAINER_HOST_IP,
  PAI_CONTAINER_HOST_PORT_LIST (``label0:p0,p1,p2;label1:p3,p4``), PAI_CONTAINER_HOST_<label>_PORT_LIST
  (``p0,p1``), PAI_TASK_ROLE_<name>_HOST_LIST (``ip:port,...`` by task index), PAI_<role>_<index>_<label>_PORT.
- ``src/rest-server/src/templates/yarnContainerScript.mustache`` at 0db059b for what the table leaves
  open: the HOST_LIST port is the task's first ``http`` port; PAI_TASK_INDEX and PAI_TASK_ROLE_NAME
  are also set; a null min count is written as an empty value; ``$PAI_DEFAULT_FS_URI`` in dataDir
  and outputDir is replaced (``models/job.js``); outputDir defaults to
  ``$PAI_DEFAULT_FS_URI/Output/$jobName`` (the guide's field table).

``jobEnvs`` are added as given, with no substitution; ``spec`` refuses ``PAI_*`` names there, so
a job cannot shadow these. PAI_WORK_DIR (the container's working directory) is the runtime's to set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.pai.spec import PaiJob, TaskRole

TaskKey = tuple[str, int]
FS_URI_VAR = "$PAI_DEFAULT_FS_URI"


@dataclass(frozen=True)
class TaskPlacement:
    host_ip: str
    ports: Mapping[str, tuple[int, ...]]  # label -> ports, as ports.assign_ports gives them


def _count(n: int | None) -> str:
    return "" if n is None else str(n)


def _ports(ports: tuple[int, ...]) -> str:
    return ",".join(map(str, ports))


def _resource(role: TaskRole) -> str:
    return f"{role.gpu_number},{role.cpu_number},{role.memory_mb},{role.shm_mb}"


def build_env(job: PaiJob, placements: Mapping[TaskKey, TaskPlacement], role_name: str, index: int, *,
              user_name: str, default_fs_uri: str = "") -> dict[str, str]:
    """The environment of task ``index`` of role ``role_name``: ``PAI_*`` then the job's ``jobEnvs``."""
    role = job.role(role_name)
    if not 0 <= index < role.task_number:
        raise ValueError(f"{role_name} has tasks 0-{role.task_number - 1}, not {index}")
    for r in job.task_roles:
        for i in range(r.task_number):
            if (r.name, i) not in placements:
                raise ValueError(f"{r.name}[{i}] has no placement")
    me = placements[(role_name, index)]
    role_list = ",".join(r.name for r in job.task_roles)

    def fs(path: str | None) -> str:
        return (path or "").replace(FS_URI_VAR, default_fs_uri)

    env: dict[str, str] = {
        # job level
        "PAI_JOB_NAME": job.job_name,
        "PAI_USER_NAME": user_name,
        "PAI_DEFAULT_FS_URI": default_fs_uri,
        "PAI_JOB_VC_NAME": job.virtual_cluster,
        "PAI_DATA_DIR": fs(job.data_dir),
        "PAI_OUTPUT_DIR": fs(job.output_dir) if job.output_dir else f"{default_fs_uri}/Output/{job.job_name}",
        "PAI_CODE_DIR": job.code_dir or "",
        "PAI_TASK_ROLE_COUNT": str(len(job.task_roles)),
        "PAI_TASK_ROLE_LIST": role_list,
        "PAI_JOB_TASK_COUNT": str(job.total_tasks),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(job.task_roles)),
        "PAI_JOB_TASK_ROLE_LIST": role_list,
    }
    for r in job.task_roles:  # task role level: every role, every task
        env[f"PAI_TASK_ROLE_TASK_COUNT_{r.name}"] = str(r.task_number)
        env[f"PAI_RESOURCE_{r.name}"] = _resource(r)
        env[f"PAI_MIN_FAILED_TASK_COUNT_{r.name}"] = _count(r.min_failed_task_count)
        env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r.name}"] = _count(r.min_succeeded_task_count)
        hosts = []
        for i in range(r.task_number):
            p = placements[(r.name, i)]
            env[f"PAI_HOST_IP_{r.name}_{i}"] = p.host_ip
            for label, ports in p.ports.items():
                env[f"PAI_PORT_LIST_{r.name}_{i}_{label}"] = _ports(ports)
                env[f"PAI_{r.name}_{i}_{label}_PORT"] = _ports(ports)
            http = p.ports.get("http", ())
            hosts.append(f"{p.host_ip}:{http[0] if http else ''}")
        env[f"PAI_TASK_ROLE_{r.name}_HOST_LIST"] = ",".join(hosts)
    env.update({  # current task role and task
        "PAI_CURRENT_TASK_ROLE_NAME": role.name,
        "PAI_TASK_ROLE_NAME": role.name,
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(role.task_number),
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": str(role.cpu_number),
        "PAI_CURRENT_TASK_ROLE_MEM_MB": str(role.memory_mb),
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(role.shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(role.gpu_number),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": _count(role.min_failed_task_count),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": _count(role.min_succeeded_task_count),
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
        "PAI_CONTAINER_HOST_IP": me.host_ip,
        "PAI_CONTAINER_HOST_PORT_LIST": ";".join(f"{label}:{_ports(p)}" for label, p in me.ports.items()),
    })
    for label, ports in me.ports.items():
        env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] = _ports(ports)
    for key, value in job.job_envs.items():
        if key in env:  # spec refuses PAI_* names; anything else colliding is a bug
            raise ValueError(f"jobEnvs.{key} collides with a system variable")
        env[key] = value
    return env
