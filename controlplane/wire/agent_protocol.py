"""Messages between the master and its agents over the agent WebSocket.

The agent connects to ``GET /agents/ws`` (WebSocket) with the header
``Authorization: Bearer <join token>``. The master closes a connection with a bad token
with code 4401 before reading anything. Every frame is one JSON object whose ``type``
field names the message; both sides decode with :func:`decode` and encode with
:func:`encode`.

Sequence:
  agent  -> Register            (first frame, also after every reconnect)
  master -> Registered          (or closes with 4401 / 4400)
  master -> StartTask / KillTask
  agent  -> TaskStarted, TaskLogs (batches), TaskExited
Keep-alive is WebSocket ping/pong (the agent pings; both libraries answer pings).

``Register.environments`` names the task environments the agent offers (``default``, its own
interpreter, always; an older agent that sends none offers just that); ``StartTask.environment``
names the one a task runs in (an older master sends none: ``default``).

An agent that reconnects lists the allocations it still runs in ``Register.running``;
messages it could not send while away (logs, exits) are sent after ``Registered``.
The master treats a repeated TaskExited for the same allocation as a no-op.
"""

from __future__ import annotations

from typing import Any

import msgspec

PROTOCOL_VERSION = 1
DEFAULT_ENVIRONMENT = "default"


class Slot(msgspec.Struct, frozen=True):
    id: int
    type: str  # "cuda" or "cpu"
    brand: str = ""
    uuid: str = ""


class Register(msgspec.Struct, tag="register", tag_field="type"):
    agent_id: str
    slots: list[Slot]
    pool: str = "default"
    version: str = ""
    addresses: list[str] = []
    running: list[str] = []  # allocation ids still running on the agent
    protocol: int = PROTOCOL_VERSION
    # Task environments it offers (environment.image names); "default" is its own interpreter.
    environments: list[str] = msgspec.field(default_factory=lambda: [DEFAULT_ENVIRONMENT])
    # The UDP port where it takes the packets of task networks that span agents (StartTask.overlay)
    # from other agents; 0: its tasks run on the host's network, so a gang with it does too.
    overlay_port: int = 0
    # The cloud instance type it runs on (EC2 instance-type, GCE machine-type; the local
    # provider's --instance-type); "" when it does not know (an older agent, a static one).
    instance_type: str = ""
    # The CPUs its tasks may use (the affinity mask, capped by a cgroup CPU quota): an OpenPAI task's
    # cpuNumber is booked against them. 0: not reported (an older agent), so CPU needs go unchecked.
    cpus: int = 0


class Registered(msgspec.Struct, tag="registered", tag_field="type"):
    cluster_id: str
    # Allocations the master no longer wants (killed or reassigned while the agent was away).
    kill: list[str] = []
    # agent_reconnect_wait: after this long away the master re-queues the agent's work, so an
    # agent that cannot reach it for that long kills its tasks (0: the master did not say).
    reconnect_wait_s: float = 0.0


class OverlayMember(msgspec.Struct, frozen=True):
    """One agent of a task network that spans agents."""

    address: str  # its tasks' address in the network: what the other members' tasks dial
    host: str  # the agent's host address, as the master reaches it
    port: int  # the agent's Register.overlay_port


class Overlay(msgspec.Struct, frozen=True):
    """A task network over several agents (agent_image/agent/overlay.py): each agent's tasks of the
    network share a namespace there with ``members[index].address``, and the agents carry the
    packets between them, each signed with ``key``."""

    key: str  # hex, made per network by the master; travels only in StartTask
    members: list[OverlayMember]
    index: int  # this agent's entry


class StartTask(msgspec.Struct, tag="start_task", tag_field="type"):
    allocation_id: str
    task_id: str
    task_type: str  # "TRIAL"
    entrypoint: str | list[str]
    # DET_* variables of reference/determined-api.md §4.2 that the master knows, plus the
    # experiment's environment.environment_variables. The agent adds DET_MASTER,
    # DET_AGENT_ID, DET_SLOT_IDS, DET_CONTAINER_ID and CUDA_VISIBLE_DEVICES.
    env: dict[str, str]
    slot_ids: list[int]
    session_token: str
    # Cache key of the model definition; the agent downloads the context through
    # GET /api/v1/tasks/{task_id}/context_directory (allocation token) when it has no copy.
    context_hash: str = ""
    # Content of info/trial.json (reference §4.3); None for non-trial tasks.
    trial_info: dict[str, Any] | None = None
    kill_grace_seconds: float = 10.0
    # A gang across agents: this agent runs rank `rank` of len(container_addrs) (rendezvous.json).
    rank: int = 0
    container_addrs: list[str] = []
    container_slot_counts: list[int] = []
    # Ports the master chose for the allocation (master/orchestration/rendezvous.py), unique among
    # live allocations on each address: the chief's c10d port, two more on the chief for the core
    # API's collectives (DET_DIST_PORTS), and each container's SSH port (0 for the chief).
    chief_port: int = 0
    dist_ports: list[int] = []
    ssh_ports: list[int] = []
    # The allocation's SSH key pair (OpenSSH private key) when the gang spans containers: the
    # DeepSpeed and Horovod launchers start other containers' workers over SSH with it.
    ssh_key: str = ""
    # The host key of a task's own SSH server (an OpenPAI job's tasks): clients pin its public half.
    ssh_host_key: str = ""
    # Folders of the working directory the task may read but not change (an OpenPAI job's codeDir),
    # relative to it; enforced by the sandbox.
    read_only_paths: list[str] = []
    # The task environment to run in (one of Register.environments), picked from the
    # experiment's environment.image by this agent's slot type.
    environment: str = DEFAULT_ENVIRONMENT
    # Checkpoints of a shared_fs storage the task may read (its trial's, what it warm-starts from),
    # mounted read-only at the container path; the rest of host_path is not in the task's view.
    readable_checkpoints: list[str] = []
    # The network the task runs in: the tasks naming one network on an agent share a namespace of
    # their own there (agent_image/agent/task_network.py); "" for the host's (a gang or job spread
    # over agents of which one runs tasks on its host network, as Determined runs multi-agent trials).
    network: str = ""
    # For a network spread over several agents: how its members reach each other.
    overlay: Overlay | None = None
    # The ports of the task's servers (a notebook's, a shell's SSH server) that the agent forwards
    # from the task's address on the host into that network: how the proxy and SSH clients reach them.
    served_ports: list[int] = []
    # The experiment's environment.pip_requirements: installed by the agent before the entrypoint
    # (agent_image/agent/task_python.py), in a layer its trials on the agent share.
    pip_requirements: list[str] = []
    # An OpenPAI task: the agent makes it a directory of its own, $PAI_OUTPUT_DIR (and sets PAI_WORK_DIR),
    # and when it ends sends what that directory holds to POST /api/v1/allocations/{id}/outputs before
    # TaskExited, so the master keeps it under the job in checkpoint storage (controlplane/pai/outputs.py).
    collect_outputs: bool = False


class KillTask(msgspec.Struct, tag="kill_task", tag_field="type"):
    allocation_id: str
    grace_seconds: float = 10.0


class TaskStarted(msgspec.Struct, tag="task_started", tag_field="type"):
    allocation_id: str
    pid: int
    started_at: float  # unix seconds, agent clock


class LogLine(msgspec.Struct, frozen=True):
    timestamp: float  # unix seconds
    message: str  # the line as printed, without the trailing newline, "[rank=N] " kept
    stdtype: str = "stdout"  # or "stderr"
    rank: int | None = None
    level: str | None = None  # LOG_LEVEL_* when the line carries one


class TaskLogs(msgspec.Struct, tag="task_logs", tag_field="type"):
    allocation_id: str
    lines: list[LogLine]


class TaskExited(msgspec.Struct, tag="task_exited", tag_field="type"):
    allocation_id: str
    exit_code: int | None  # None when the process could not be started
    reason: str = ""  # e.g. "killed", "failed to start: ...", "startup-hook failed"
    # The task's setup failed before its entrypoint ran (environment.pip_requirements did not install,
    # startup-hook.sh failed): a restart would fail the same way, so the master restarts nothing.
    setup_failed: bool = False


class InstanceInterrupted(msgspec.Struct, tag="instance_interrupted", tag_field="type"):
    """The cloud gave notice that it takes this agent's instance back (spot / preemptible)."""

    agent_id: str
    reason: str


AgentMessage = Register | TaskStarted | TaskLogs | TaskExited | InstanceInterrupted
MasterMessage = Registered | StartTask | KillTask

_agent_decoder = msgspec.json.Decoder(AgentMessage)
_master_decoder = msgspec.json.Decoder(MasterMessage)
_encoder = msgspec.json.Encoder()


def encode(msg: AgentMessage | MasterMessage) -> bytes:
    return _encoder.encode(msg)


def decode_from_agent(data: bytes | str) -> AgentMessage:
    return _agent_decoder.decode(data)


def decode_from_master(data: bytes | str) -> MasterMessage:
    return _master_decoder.decode(data)
