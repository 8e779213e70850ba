"""SQLAlchemy models: the database is the truth for experiments, trials, allocations and agents.

Schema changes go through an Alembic migration in ``migrations/versions``; the master applies
them at start. Columns hold plain JSON; float metric values that JSON cannot carry (NaN, ±Inf)
are stored as the strings "NaN", "Infinity", "-Infinity" (see ``controlplane.common.floats``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from controlplane.config.stored import SearcherView, searcher_of
from controlplane.scheduler.model import DEFAULT_PRIORITY


class Base(DeclarativeBase):
    pass


def _ts() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True))


class ClusterInfo(Base):
    """One row: the cluster's identity, created at first start."""

    __tablename__ = "cluster_info"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = _ts()


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(255), unique=True)
    # scrypt hash of the client-side password value (reference §1.1: sha512 of salt+password,
    # or "" for an empty password); "salt$hash" in hex.
    password_hash: Mapped[str] = mapped_column(String(512))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)  # role == "admin", for Determined's clients
    role: Mapped[str] = mapped_column(String(16), default="user")  # controlplane.master.principals.Role
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    display_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = _ts()


class UserSession(Base):
    __tablename__ = "user_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the token
    created_at: Mapped[datetime] = _ts()
    expires_at: Mapped[datetime] = _ts()


class Experiment(Base):
    __tablename__ = "experiments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(32))  # controlplane.state.experiment.ExperimentState
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # validated, defaults filled
    original_config: Mapped[str] = mapped_column(Text)  # the YAML as submitted
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    searcher_type: Mapped[str] = mapped_column(String(32))
    searcher_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    context_hash: Mapped[str] = mapped_column(String(64))
    resource_pool: Mapped[str] = mapped_column(String(255), default="default")
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    # Job-queue settings (det job update / det experiment set); None priority = the pool's default.
    priority: Mapped[int | None] = mapped_column(Integer, nullable=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    max_slots: Mapped[int | None] = mapped_column(Integer, nullable=True)
    queue_position: Mapped[float] = mapped_column(Float, default=0.0)  # lower runs first among equals
    project_id: Mapped[int] = mapped_column(Integer, default=1, server_default="1", index=True)  # projects.id
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    # What its progress is computed from without rebuilding the searcher, written with every snapshot
    # (searchers/progress.py's basis: a fixed value, or the planned searchers' counts and trials to sum).
    progress_basis: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    notes: Mapped[str] = mapped_column(Text, default="")
    start_time: Mapped[datetime] = _ts()
    end_time: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    # The lists' usual filter (archived or not, in which projects) counted from the index alone, and
    # their default order (newest first) read in index order.
    __table_args__ = (Index("ix_experiments_archived_id", "archived", "id", "project_id"),)

    @property
    def searcher(self) -> SearcherView:
        """Its config's ``searcher`` as read everywhere (``config/stored.py``: the defaults)."""
        return searcher_of(self.config)


class ExperimentContext(Base):
    """An experiment's code: the tar.gz of its context (up to 95 MiB), in a table of its own so that no
    read of experiments touches it (SQLite keeps a row's columns in one record: a column stored after a
    large blob is reached through the blob's overflow pages)."""

    __tablename__ = "experiment_contexts"
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True)
    model_definition: Mapped[bytes] = mapped_column(LargeBinary)


class Trial(Base):
    __tablename__ = "trials"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    request_id: Mapped[str] = mapped_column(String(64))  # the searcher's id for this trial
    task_id: Mapped[str] = mapped_column(String(128), unique=True)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(32))  # controlplane.state.trial.TrialState
    restarts: Mapped[int] = mapped_column(Integer, default=0)  # restarts after a failure, at most max_restarts
    run_id: Mapped[int] = mapped_column(Integer, default=0)  # DET_TRIAL_RUN_ID: +1 per allocation
    total_batches: Mapped[int] = mapped_column(BigInteger, default=0)  # highest steps_completed reported
    latest_checkpoint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # What its runs restore from while it has no checkpoint of its own (DET_LATEST_CHECKPOINT): its
    # experiment's searcher.source_checkpoint_uuid, or source_trial_id's latest checkpoint.
    warm_start_checkpoint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    searcher_metric_value: Mapped[float | None] = mapped_column(Float, nullable=True)  # best so far
    # steps_completed of the validation that holds searcher_metric_value, so reads find it by index.
    best_validation_steps: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    runner_state: Mapped[str] = mapped_column(String(64), default="")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    exit_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)  # early-exit reason
    start_time: Mapped[datetime] = _ts()
    end_time: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Allocation(Base):
    """One attempt to run a trial: queued, placed on an agent, run, ended."""

    __tablename__ = "allocations"
    id: Mapped[str] = mapped_column(String(160), primary_key=True)  # "<task_id>.<run_id>"
    task_id: Mapped[str] = mapped_column(String(128), index=True)
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(32))  # controlplane.state.allocation.AllocationState
    resource_pool: Mapped[str] = mapped_column(String(255), default="default")
    slots_needed: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[int] = mapped_column(Integer, default=DEFAULT_PRIORITY)
    agent_id: Mapped[str | None] = mapped_column(String(255), nullable=True)  # rank 0's agent
    slot_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)  # rank 0's slots
    # Every rank of the gang, one per agent: a list of orchestration/gang.py's Rank records.
    resources: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # Killed by the master after ignoring a preemption: re-queued, not counted as a failure.
    killed_for_preemption: Mapped[bool] = mapped_column(Boolean, default=False)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the session token
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    preempt_acked: Mapped[bool] = mapped_column(Boolean, default=False)
    preempt_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Why it was asked to stop, and when it is killed if it has not exited by then (set with
    # preempt_requested: now + the effective preemption timeout, orchestrator.request_preemption).
    preempt_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    preempt_deadline: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Its experiment's own `preemption_timeout` (seconds), stored at placement; None: the pool's or
    # the master's applies.
    preemption_timeout_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Its task long-polled its preemption signal (as Determined's harness and core API do when they
    # watch for preemption): it declared it checkpoints and exits when asked, so consolidation may move it.
    watches_preemption: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_reason: Mapped[str] = mapped_column(Text, default="")
    # An OpenPAI job's task: its job, role and task index (None for a trial's allocation).
    pai_job_id: Mapped[int | None] = mapped_column(ForeignKey("pai_jobs.id", ondelete="CASCADE"), nullable=True,
                                                   index=True)
    task_role: Mapped[str | None] = mapped_column(String(64), nullable=True)
    task_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = _ts()
    assigned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class PaiJob(Base):
    """An OpenPAI job (its v1 job JSON); each attempt's tasks are allocations with ``pai_job_id``.

    Determined's commands, shells, notebooks and TensorBoards are run the same way, as a job of one
    task whose JSON the master writes (``kind`` says which; ``services/commands.py``)."""

    __tablename__ = "pai_jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="pai", server_default="pai")  # or command, shell, ...
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    idle_timeout_s: Mapped[int | None] = mapped_column(Integer, nullable=True)  # notebooks, TensorBoards
    name: Mapped[str] = mapped_column(String(255))  # jobName: unique per user
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    state: Mapped[str] = mapped_column(String(32))  # controlplane.state.pai_job
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the job JSON as submitted
    code: Mapped[bytes] = mapped_column(LargeBinary)  # tar.gz of codeDir (an empty archive without one)
    code_hash: Mapped[str] = mapped_column(String(64))
    resource_pool: Mapped[str] = mapped_column(String(255))  # virtualCluster
    job_id: Mapped[str] = mapped_column(String(64), unique=True)  # its id in the job queue
    priority: Mapped[int | None] = mapped_column(Integer, nullable=True)
    queue_position: Mapped[float] = mapped_column(Float, default=0.0)
    attempt: Mapped[int] = mapped_column(Integer, default=1)  # 1, then +1 per retry
    # The job's SSH key pair (its tasks trust it; its owner gets it) and its tasks' host key, OpenSSH
    # private keys: secrets, never in an answer but the owner's GET .../ssh.
    ssh_key: Mapped[str] = mapped_column(Text, default="")
    ssh_host_key: Mapped[str] = mapped_column(Text, default="")
    exit_reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = _ts()
    launched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A command's, shell's, notebook's or TensorBoard's config as launched (Determined's command
    # config, template merged); None for an OpenPAI job and for those launched before 0018.
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    __table_args__ = (UniqueConstraint("owner_id", "name"),)


class PaiOutputSet(Base):
    """What one task of an OpenPAI job's attempt left in ``$PAI_OUTPUT_DIR``, kept in checkpoint storage
    (``controlplane/pai/outputs.py``): where (the storage config it went to, secrets as configured: never
    in an answer), how much, and what its agent left out."""

    __tablename__ = "pai_output_sets"
    pai_job_id: Mapped[int] = mapped_column(ForeignKey("pai_jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_role: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    storage: Mapped[dict[str, Any]] = mapped_column(JSON)
    files: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    left_out: Mapped[str] = mapped_column(Text, default="", server_default="")  # the agent's words
    created_at: Mapped[datetime] = _ts()


class PaiOutputFile(Base):
    """One kept file of a ``PaiOutputSet``: a page of a job's outputs is one range of this key."""

    __tablename__ = "pai_output_files"
    pai_job_id: Mapped[int] = mapped_column(ForeignKey("pai_jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_role: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(255), default="default")
    slots: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [wire Slot as dict]
    addresses: Mapped[list[Any]] = mapped_column(JSON, default=list)
    version: Mapped[str] = mapped_column(String(64), default="")
    connected: Mapped[bool] = mapped_column(Boolean, default=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    # det slot disable: slot id (str) -> True when draining (running work finishes), False when disabled
    disabled_slots: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    registered_at: Mapped[datetime] = _ts()
    last_seen: Mapped[datetime] = _ts()


class StateTransition(Base):
    """Every state change of an experiment, trial or allocation, with time and reason."""

    __tablename__ = "state_transitions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entity: Mapped[str] = mapped_column(String(16))  # "experiment" | "trial" | "allocation"
    entity_id: Mapped[str] = mapped_column(String(160))
    from_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_state: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = _ts()

    __table_args__ = (Index("ix_state_transitions_entity", "entity", "entity_id"),)


class Metric(Base):
    """One report: a group ("training", "validation", ...) at a step, as avgMetrics."""

    __tablename__ = "metrics"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    trial_run_id: Mapped[int] = mapped_column(Integer, default=0)
    group: Mapped[str] = mapped_column("metric_group", String(64))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # avgMetrics
    batch_metrics: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    report_time: Mapped[datetime] = _ts()

    __table_args__ = (
        Index("ix_metrics_trial_group_steps", "trial_id", "metric_group", "steps_completed"),
        # A retried report (its 200 lost in a crash) is stored once: inserts skip duplicates.
        Index("uq_metrics_report", "trial_id", "trial_run_id", "metric_group", "steps_completed", unique=True),
    )


class TrialMetricSummary(Base):
    """Determined's summary metrics of one trial's group, kept up to date in the transaction that
    stores its reports (``services/metric_summaries.py``): how many reports, the newest one's values,
    and per metric name its value kinds and numeric count/min/max/sum."""

    __tablename__ = "trial_metric_summaries"
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    group: Mapped[str] = mapped_column("metric_group", String(64), primary_key=True)
    reports: Mapped[int] = mapped_column(BigInteger, default=0)
    last_steps: Mapped[int] = mapped_column(BigInteger, default=0)  # the newest report by (steps, id)
    last_id: Mapped[int] = mapped_column(BigInteger, default=0)
    last_metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # its avgMetrics
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # name -> [kinds, count, min, max, sum]


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    uuid: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    experiment_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    task_id: Mapped[str] = mapped_column(String(128), default="")
    allocation_id: Mapped[str] = mapped_column(String(160), default="")
    state: Mapped[str] = mapped_column(String(32))  # STATE_COMPLETED, STATE_DELETED, ...
    steps_completed: Mapped[int] = mapped_column(BigInteger, default=0)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # relpath -> size in bytes
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    storage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # checkpoint_storage config used
    # relpath -> sha256 hex of each file as reported (None: not known, not verified); download and
    # restore refuse a file that no longer matches (services/checkpoint_files.py)
    digests: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    # The files at its place are its own (published by the master, or uploaded by its trial under a
    # new uuid): only then do download, GC and `det checkpoint rm` touch storage (migration 0022).
    owns_files: Mapped[bool] = mapped_column(Boolean, default=False, server_default=true())
    report_time: Mapped[datetime] = _ts()
    # Garbage collection: STATE_PARTIALLY_DELETED means "its files are being deleted" (storage
    # first, then this row becomes STATE_DELETED); the reason and the last failure are kept.
    delete_reason: Mapped[str] = mapped_column(Text, default="")
    delete_error: Mapped[str] = mapped_column(Text, default="")
    delete_attempts: Mapped[int] = mapped_column(Integer, default=0)


class TaskLog(Base):
    __tablename__ = "task_logs"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(128))
    trial_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allocation_id: Mapped[str] = mapped_column(String(160), default="")
    agent_id: Mapped[str] = mapped_column(String(255), default="")
    rank_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stdtype: Mapped[str] = mapped_column(String(16), default="stdout")
    level: Mapped[str] = mapped_column(String(32), default="LOG_LEVEL_INFO")
    source: Mapped[str] = mapped_column(String(32), default="task")
    timestamp: Mapped[datetime] = _ts()
    log: Mapped[str] = mapped_column(Text)  # one line, ending in "\n"

    __table_args__ = (Index("ix_task_logs_trial_id_id", "trial_id", "id"),
                      Index("ix_task_logs_task_id_id", "task_id", "id"))


class Instance(Base):
    """A cloud (or local) instance the autoscaler launched: found again by its tags each tick.

    Its state history is in state_transitions (entity "instance"); cost is instance-seconds from
    launched_at to terminated_at (or now) times price_per_hour from the pool's provider config.
    """

    __tablename__ = "instances"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # EC2 instance id / GCE name
    pool: Mapped[str] = mapped_column(String(255), index=True)
    provider: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(128), default="")
    zone: Mapped[str] = mapped_column(String(128), default="")
    spot: Mapped[bool] = mapped_column(Boolean, default=False)
    launch_request_id: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(32))  # pending, running, stopping, stopped, terminated
    price_per_hour: Mapped[float] = mapped_column(Float, default=0.0)
    launched_at: Mapped[datetime] = _ts()
    registered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    terminated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")  # why it was launched, or why it ended


class ConsolidationMove(Base):
    """A trial the autoscaler moved off an underused instance so the instance could be terminated
    (``autoscaling/consolidation.py``): one row per moved allocation; the moves of one drain share
    ``drain_id`` and the drain's price and expected saving. Kept as history: no foreign keys."""

    __tablename__ = "consolidation_moves"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pool: Mapped[str] = mapped_column(String(255))
    drain_id: Mapped[str] = mapped_column(String(32))
    instance_id: Mapped[str] = mapped_column(String(255), index=True)  # the drained instance (its agent's id)
    trial_id: Mapped[int] = mapped_column(Integer, index=True)
    allocation_id: Mapped[str] = mapped_column(String(160))
    to_agent: Mapped[str] = mapped_column(String(255))  # where the planner expected it to go
    reason: Mapped[str] = mapped_column(Text)
    usd_per_hour: Mapped[float] = mapped_column(Float, default=0.0)  # what terminating the instance saves an hour
    expected_saving_usd: Mapped[float] = mapped_column(Float, default=0.0)  # the drain's, net of its moves' cost
    created_at: Mapped[datetime] = _ts()
    # the admin enabled the agent again: this drain is over, so a later drain of it is not consolidation's
    drain_ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (Index("ix_consolidation_moves_pool_created_at", "pool", "created_at"),)


class RegisteredModel(Base):
    """A model of the registry: a name under which checkpoints of any experiments are versioned."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = _ts()
    updated_at: Mapped[datetime] = _ts()  # any change to the model, or a version added or removed


class ModelVersion(Base):
    """Version N (1, 2, 3, ... per model) of a registered model: one checkpoint, by uuid.

    The foreign key has no ON DELETE: a checkpoint row that the registry refers to cannot be
    deleted (checkpoint GC must skip registered checkpoints, see services/models.py).
    """

    __tablename__ = "model_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    checkpoint_uuid: Mapped[str] = mapped_column(ForeignKey("checkpoints.uuid"), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = _ts()
    updated_at: Mapped[datetime] = _ts()

    __table_args__ = (UniqueConstraint("model_id", "version", name="uq_model_versions_model_id_version"),)


class Template(Base):
    """A config template: settings shared by many experiments, merged under their configs by name.

    ``config`` is a partial experiment config (secrets included: answers redact them); its owner
    (or an admin) alone may change or delete it. There is one workspace, so ``workspace_id`` is 1.
    """

    __tablename__ = "templates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    workspace_id: Mapped[int] = mapped_column(Integer, default=1)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = _ts()
    updated_at: Mapped[datetime] = _ts()


class Workspace(Base):
    """Determined's workspaces: ``Uncategorized`` (id 1, immutable) and those users create."""

    __tablename__ = "workspaces"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    name_key: Mapped[str] = mapped_column(String(80), unique=True)  # lower-cased: unique regardless of case
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = _ts()


class Project(Base):
    """A workspace's projects; every experiment is in one (``Uncategorized``, id 1, by default)."""

    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    key: Mapped[str] = mapped_column(String(5), unique=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = _ts()
