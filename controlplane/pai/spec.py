"""OpenPAI's v1 job JSON, parsed into frozen dataclasses; every mistake named by field path and rule.

Source: microsoft/pai, ``docs/job_tutorial.md`` at 0db059b215d497ca09fd9974cd7bc668f7090b5c
(2019-05-14): the field table (patterns, "no less than" rules, shmMB default 64 and "no more than
memory size", minFailed/minSucceededTaskCount "null or no less than 1"). Where the guide is silent
the rest-server of the same commit decides: ``src/rest-server/src/config/job.js`` (minFailedTaskCount
defaults to 1, minSucceededTaskCount to null, virtualCluster to ``default``, retryCount to 0),
``src/rest-server/src/middlewares/job.js`` (neither count may exceed taskNumber) and
``src/rest-server/src/models/job.js`` (each role also gets ``http`` and ``ssh`` ports, one each,
unless it declares them: ``TaskRole.ports``).

Our choices, beyond the guide:
- every string, list and map is bounded (``MAX_*``), total tasks capped at ``MAX_TOTAL_TASKS``;
- ``codeDir`` must be a local directory (a later step uploads it like a context, under OpenPAI's
  200 MB limit); an HDFS URI, or any URI, is refused: this cluster has no HDFS;
- ``authFile`` is accepted and ignored, with a warning; so are ``jobEnvs.paiAzRDMA``/``isDebug``;
- ``outputDir`` is a name, with a warning: tasks write to ``$PAI_OUTPUT_DIR``, a directory of their own,
  kept in checkpoint storage (``outputs.py``);
- ``gpuNumber`` is the task's slot count;
- ``jobEnvs`` values are strings; numbers and booleans (the guide's own example has
  ``"batch_size": 32``) become their JSON text. Names must be shell variable names, and ``PAI_*``
  names are refused, so the system's variables always mean what the guide says;
- the obsolete ``killAllOnCompletedTaskNumber`` is refused with what replaces it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain

JOB_NAME_RE = re.compile(r"^[A-Za-z0-9\-._~]+$")  # the guide's, for jobName
NAME_RE = re.compile(r"^[A-Za-z0-9._~]+$")  # the guide's, for taskRole.name and portType.label
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")

MAX_JOB_BYTES = 1024 * 1024
MAX_NAME = 128
MAX_ROLE_NAME = 64
MAX_PATH = 4096
MAX_IMAGE = 1024
MAX_COMMAND = 64 * 1024
MAX_ROLES = 16
MAX_TASKS_PER_ROLE = 1024
MAX_TOTAL_TASKS = 1024
MAX_PORT_TYPES = 16
MAX_PORTS_PER_TYPE = 64
MAX_CPUS = 1024
MAX_MEMORY_MB = 16 * 1024 * 1024
MAX_GPUS = 64
MAX_RETRIES = 100
MAX_ENVS = 256
MAX_ENV_VALUE = 32 * 1024
MAX_EXTRAS_BYTES = 64 * 1024
MAX_PORT = 65535
DEFAULT_SHM_MB = 64
DEFAULT_PORT_LABELS = ("http", "ssh")  # what models/job.js adds to every role

JOB_FIELDS = ("jobName", "image", "authFile", "dataDir", "outputDir", "codeDir", "virtualCluster",
              "taskRoles", "gpuType", "retryCount", "jobEnvs", "extras")
ROLE_FIELDS = ("name", "taskNumber", "cpuNumber", "memoryMB", "shmMB", "gpuNumber", "portList",
               "command", "minFailedTaskCount", "minSucceededTaskCount")
PORT_FIELDS = ("label", "beginAt", "portNumber")
IGNORED_ENV_FLAGS = {"paiAzRDMA": "Azure RDMA", "isDebug": "keeping a failed container for debugging"}


class PaiJobError(ValueError):
    """Every mistake found in one job, each a ConfigError with its field path and rule."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in errors))


@dataclass(frozen=True)
class PortType:
    label: str
    begin_at: int  # 0: any free port (the guide's "random selection")
    port_number: int


@dataclass(frozen=True)
class TaskRole:
    name: str
    task_number: int
    cpu_number: int
    memory_mb: int
    shm_mb: int
    gpu_number: int  # slots
    port_list: tuple[PortType, ...]  # as declared
    command: str
    min_failed_task_count: int | None  # None: failures never fail the job
    min_succeeded_task_count: int | None  # None: the job succeeds only when every task is done

    @property
    def ports(self) -> tuple[PortType, ...]:
        """The declared port types, then ``http`` and ``ssh`` (one port each) if not declared."""
        declared = {p.label for p in self.port_list}
        return self.port_list + tuple(PortType(label, 0, 1) for label in DEFAULT_PORT_LABELS
                                      if label not in declared)


@dataclass(frozen=True)
class PaiJob:
    job_name: str
    image: str
    auth_file: str | None
    data_dir: str | None
    output_dir: str | None
    code_dir: str | None  # a local directory, uploaded by the client
    virtual_cluster: str
    task_roles: tuple[TaskRole, ...]
    gpu_type: str | None
    retry_count: int
    job_envs: Mapping[str, str]
    extras: Mapping[str, Any]

    @property
    def total_tasks(self) -> int:
        return sum(r.task_number for r in self.task_roles)

    def role(self, name: str) -> TaskRole:
        for r in self.task_roles:
            if r.name == name:
                return r
        raise KeyError(name)


class _Reader:
    """Collects errors instead of stopping at the first, so one answer lists every mistake."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def fail(self, path: str, rule: str) -> None:
        self.errors.append(ConfigError(path, rule))

    def unknown(self, raw: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
        for key in raw:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                if key == "killAllOnCompletedTaskNumber":
                    self.fail(where, "obsolete: use taskRoles[].minFailedTaskCount and minSucceededTaskCount")
                else:
                    self.fail(where, f"unknown field (allowed: {', '.join(allowed)})")

    def string(self, raw: dict[str, Any], key: str, path: str, *, required: bool = False, max_len: int = MAX_PATH,
               pattern: re.Pattern[str] | None = None, pattern_text: str = "") -> str | None:
        value = raw.get(key)
        if value is None or value == "":
            if required:
                self.fail(path, "required, can not be empty")
            return None
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {type(value).__name__}")
            return None
        if len(value) > max_len:
            self.fail(path, f"at most {max_len} characters, got {len(value)}")
            return None
        if pattern is not None and not pattern.fullmatch(value):  # match() lets "x\n" past the $
            self.fail(path, f"must match {pattern_text or pattern.pattern}")
            return None
        if any(ord(c) < 32 and c not in "\t\n" for c in value):
            self.fail(path, "must not contain control characters")
            return None
        return value

    def integer(self, raw: dict[str, Any], key: str, path: str, *, minimum: int, maximum: int, rule: str,
                default: int | None = None) -> int | None:
        if key not in raw or raw[key] is None:
            if default is None:
                self.fail(path, "required")
            return default
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {value!r}")
            return None
        if value < minimum:
            self.fail(path, rule)
            return None
        if value > maximum:
            self.fail(path, f"at most {maximum}, got {value}")
            return None
        return value


def parse_job(raw: Any) -> tuple[PaiJob, list[str]]:
    """The job and its warnings; raises PaiJobError listing every mistake."""
    if not isinstance(raw, dict):
        raise PaiJobError([ConfigError("", f"the job must be a JSON object, got {type(raw).__name__}")])
    try:  # shape first: JSON-only values, bounded size and depth, before any field is read
        check_plain(raw, Limits(max_bytes=MAX_JOB_BYTES, max_depth=16))
    except ConfigError as e:
        raise PaiJobError([e]) from None
    r = _Reader()
    warnings: list[str] = []
    r.unknown(raw, JOB_FIELDS, "")
    job_name = r.string(raw, "jobName", "jobName", required=True, max_len=MAX_NAME, pattern=JOB_NAME_RE)
    image = r.string(raw, "image", "image", required=True, max_len=MAX_IMAGE)
    if image is not None and any(c.isspace() for c in image):
        r.fail("image", "must not contain whitespace")
    auth_file = r.string(raw, "authFile", "authFile")
    if auth_file is not None:
        warnings.append("authFile: not used: no image is pulled; 'image' names a task environment the agents "
                        "already offer (det agent list)")
    data_dir = r.string(raw, "dataDir", "dataDir")
    output_dir = r.string(raw, "outputDir", "outputDir")
    if output_dir is not None:
        warnings.append(f"outputDir: {output_dir!r} is a name only here: each task writes to $PAI_OUTPUT_DIR, a "
                        "directory of its own, and what it holds when the task ends is kept under the job in the "
                        "cluster's checkpoint storage, at $PAI_DEFAULT_FS_URI (det pai output JOB)")
    code_dir = _code_dir(r, raw)
    virtual_cluster = r.string(raw, "virtualCluster", "virtualCluster", max_len=MAX_NAME) or "default"
    gpu_type = r.string(raw, "gpuType", "gpuType", max_len=MAX_NAME)
    retry_count = r.integer(raw, "retryCount", "retryCount", minimum=0, maximum=MAX_RETRIES,
                            rule="no less than 0", default=0)
    roles = _task_roles(r, raw.get("taskRoles"))
    envs = _job_envs(r, raw.get("jobEnvs"), warnings)
    extras = _extras(r, raw.get("extras"))
    if r.errors:
        raise PaiJobError(r.errors)
    assert job_name is not None and image is not None and retry_count is not None
    job = PaiJob(job_name=job_name, image=image, auth_file=auth_file, data_dir=data_dir, output_dir=output_dir,
                 code_dir=code_dir, virtual_cluster=virtual_cluster, task_roles=roles, gpu_type=gpu_type,
                 retry_count=retry_count, job_envs=MappingProxyType(envs), extras=MappingProxyType(extras))
    return job, warnings


def _code_dir(r: _Reader, raw: dict[str, Any]) -> str | None:
    value = r.string(raw, "codeDir", "codeDir")
    if value is None:
        return None
    if value.startswith("$PAI_DEFAULT_FS_URI") or value.lower().startswith("hdfs:"):
        r.fail("codeDir", "HDFS URIs are not supported here (no HDFS): give a local directory, "
                          "which the client uploads with the job (at most 200 MB, OpenPAI's limit)")
    elif URI_RE.match(value):
        r.fail("codeDir", "must be a local directory path, not a URI")
    return value


def _task_roles(r: _Reader, value: Any) -> tuple[TaskRole, ...]:
    if value is None:
        r.fail("taskRoles", "required, one task role at least")
        return ()
    if not isinstance(value, list):
        r.fail("taskRoles", f"must be a list, got {type(value).__name__}")
        return ()
    if not value:
        r.fail("taskRoles", "one task role at least")
        return ()
    if len(value) > MAX_ROLES:
        r.fail("taskRoles", f"at most {MAX_ROLES} task roles, got {len(value)}")
        return ()
    roles: list[TaskRole] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        role = _task_role(r, item, f"taskRoles[{i}]")
        if role is None:
            continue
        if role.name in seen:
            r.fail(f"taskRoles[{i}].name", f"need to be unique with other roles: {role.name!r} repeats")
        seen.add(role.name)
        roles.append(role)
    total = sum(role.task_number for role in roles)
    if total > MAX_TOTAL_TASKS:
        r.fail("taskRoles", f"at most {MAX_TOTAL_TASKS} tasks in all, got {total}")
    return tuple(roles)


def _task_role(r: _Reader, raw: Any, path: str) -> TaskRole | None:
    if not isinstance(raw, dict):
        r.fail(path, f"must be an object, got {type(raw).__name__}")
        return None
    before = len(r.errors)
    r.unknown(raw, ROLE_FIELDS, path)
    name = r.string(raw, "name", f"{path}.name", required=True, max_len=MAX_ROLE_NAME, pattern=NAME_RE)
    tasks = r.integer(raw, "taskNumber", f"{path}.taskNumber", minimum=1, maximum=MAX_TASKS_PER_ROLE,
                      rule="no less than 1")
    cpus = r.integer(raw, "cpuNumber", f"{path}.cpuNumber", minimum=1, maximum=MAX_CPUS, rule="no less than 1")
    memory = r.integer(raw, "memoryMB", f"{path}.memoryMB", minimum=100, maximum=MAX_MEMORY_MB,
                       rule="no less than 100")
    shm = r.integer(raw, "shmMB", f"{path}.shmMB", minimum=0, maximum=MAX_MEMORY_MB, rule="no less than 0",
                    default=DEFAULT_SHM_MB)
    if shm is not None and memory is not None and shm > memory:
        r.fail(f"{path}.shmMB", f"no more than memory size ({memory}), got {shm}")
    gpus = r.integer(raw, "gpuNumber", f"{path}.gpuNumber", minimum=0, maximum=MAX_GPUS, rule="no less than 0")
    ports = _port_list(r, raw.get("portList"), f"{path}.portList")
    command = r.string(raw, "command", f"{path}.command", required=True, max_len=MAX_COMMAND)
    if command is not None and not command.strip():
        r.fail(f"{path}.command", "can not be empty")
    min_failed = _min_count(r, raw, "minFailedTaskCount", path, tasks, default=1)
    min_succeeded = _min_count(r, raw, "minSucceededTaskCount", path, tasks, default=None)
    if len(r.errors) > before:
        return None
    assert name is not None and tasks is not None and cpus is not None and memory is not None
    assert shm is not None and gpus is not None and command is not None
    return TaskRole(name=name, task_number=tasks, cpu_number=cpus, memory_mb=memory, shm_mb=shm,
                    gpu_number=gpus, port_list=ports, command=command, min_failed_task_count=min_failed,
                    min_succeeded_task_count=min_succeeded)


def _min_count(r: _Reader, raw: dict[str, Any], key: str, path: str, tasks: int | None,
               default: int | None) -> int | None:
    where = f"{path}.{key}"
    if key not in raw:
        return default
    if raw[key] is None:  # explicit null: the rule is off
        return None
    value = r.integer(raw, key, where, minimum=1, maximum=MAX_TASKS_PER_ROLE, rule="null or no less than 1")
    if value is not None and tasks is not None and value > tasks:
        r.fail(where, f"should not be greater than taskNumber ({tasks}), got {value}")
    return value


def _port_list(r: _Reader, value: Any, path: str) -> tuple[PortType, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        r.fail(path, f"must be a list, got {type(value).__name__}")
        return ()
    if len(value) > MAX_PORT_TYPES:
        r.fail(path, f"at most {MAX_PORT_TYPES} port types, got {len(value)}")
        return ()
    out: list[PortType] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            r.fail(where, f"must be an object, got {type(item).__name__}")
            continue
        r.unknown(item, PORT_FIELDS, where)
        label = r.string(item, "label", f"{where}.label", required=True, max_len=MAX_ROLE_NAME, pattern=NAME_RE)
        begin = r.integer(item, "beginAt", f"{where}.beginAt", minimum=0, maximum=MAX_PORT,
                          rule="no less than 0 (0 for random selection)")
        count = r.integer(item, "portNumber", f"{where}.portNumber", minimum=1, maximum=MAX_PORTS_PER_TYPE,
                          rule="no less than 1")
        if label is not None and label in {p.label for p in out}:
            r.fail(f"{where}.label", f"must be unique in the role: {label!r} repeats")
            continue
        if begin and count and begin + count - 1 > MAX_PORT:
            r.fail(f"{where}.beginAt", f"beginAt + portNumber - 1 must be at most {MAX_PORT}")
            continue
        clash = next((p for p in out if begin and p.begin_at and count and
                      begin <= p.begin_at + p.port_number - 1 and p.begin_at <= begin + count - 1), None)
        if clash is not None:  # one task would need the same port twice
            r.fail(f"{where}.beginAt", f"overlaps the ports of port type {clash.label!r}")
            continue
        if label is not None and begin is not None and count is not None:
            out.append(PortType(label, begin, count))
    return tuple(out)


def _job_envs(r: _Reader, value: Any, warnings: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        r.fail("jobEnvs", f"must be an object, got {type(value).__name__}")
        return {}
    if len(value) > MAX_ENVS:
        r.fail("jobEnvs", f"at most {MAX_ENVS} variables, got {len(value)}")
        return {}
    out: dict[str, str] = {}
    for key, v in value.items():
        where = f"jobEnvs.{key}"
        if not ENV_NAME_RE.fullmatch(key) or len(key) > MAX_ROLE_NAME * 4:
            r.fail(where, f"name must match {ENV_NAME_RE.pattern} (at most {MAX_ROLE_NAME * 4} characters)")
            continue
        if key.upper().startswith("PAI_"):
            r.fail(where, "PAI_* names are the system's: choose another name")
            continue
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, (str, int)):
            text = str(v)
        else:
            r.fail(where, f"must be a string, integer or boolean, got {type(v).__name__}")
            continue
        if len(text) > MAX_ENV_VALUE:
            r.fail(where, f"at most {MAX_ENV_VALUE} characters, got {len(text)}")
            continue
        if "\x00" in text or "\n" in text:
            r.fail(where, "must not contain NUL or newline")  # an env file holds one variable a line
            continue
        if key in IGNORED_ENV_FLAGS:
            warnings.append(f"jobEnvs.{key}: passed as a plain variable; {IGNORED_ENV_FLAGS[key]} is not supported")
        out[key] = text  # no substitution: "$X" stays "$X"
    return out


def _extras(r: _Reader, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        r.fail("extras", f"must be an object, got {type(value).__name__}")
        return {}
    try:
        check_plain(value, Limits(max_bytes=MAX_EXTRAS_BYTES, max_depth=8))
    except ConfigError as e:
        r.fail(f"extras.{e.path}" if e.path else "extras", e.rule)
        return {}
    return dict(value)


CODE_DIR_DEFAULT = "code"


def code_dir_name(code_dir: str) -> str:
    """The folder of the working directory ``codeDir`` is copied into: its last component, as
    OpenPAI's container script copies it (``./code`` for ``.../code``)."""
    name = code_dir.rstrip("/").rpartition("/")[2]
    return CODE_DIR_DEFAULT if name in ("", ".", "..") else name
