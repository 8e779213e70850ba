"""Compute Engine provisioner (google-cloud-compute, REST transport).

One `insert` per instance with a deterministic name (`det-<pool>-<hash of request id>-<n>`),
so retrying a launch request after a timeout hits "already exists" instead of launching twice.
Operations are polled with our own ZoneOperationsClient (`insert_unary`), because the library's
extended operations poll Google's real endpoint even when `endpoint` points at an emulator.
Listing uses the aggregated list filtered by labels, so instances in a zone that was since
removed from the config are still found (and can be reaped) rather than leaked.
`instance_id` is the instance name: it is what the agent reads from the metadata server.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from controlplane.state.instance import InstanceState
from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    Instance,
    InvalidConfig,
    LaunchRequest,
    ProvisionerError,
    instance_tags,
    sanitize_label,
    validate_request,
)
from provisioners.gce_errors import map_error, operation_error, translated

_STATES: dict[str, InstanceState] = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "REPAIRING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "STOPPED": "stopped",
    "SUSPENDED": "stopped",
    "TERMINATED": "stopped",  # GCE's TERMINATED means stopped (e.g. preempted), not deleted
}


@dataclass(frozen=True)
class GceConfig:
    """A pool's GCP provider settings."""

    project: str
    zones: list[str]
    machine_type: str | list[str]  # a list: a mixed pool's types, each launch names one
    image: str  # e.g. "projects/debian-cloud/global/images/family/debian-12"
    gpu_type: str | None = None  # e.g. "nvidia-l4"
    gpu_count: int = 0
    provisioning_model: Literal["STANDARD", "SPOT"] = "STANDARD"  # read by the autoscaler for req.spot
    service_account: str | None = None
    scopes: list[str] = field(default_factory=lambda: ["https://www.googleapis.com/auth/cloud-platform"])
    network: str = "global/networks/default"
    subnetwork: str | None = None
    external_ip: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    disk_gb: int = 200
    disk_type: str = "pd-balanced"
    endpoint: str | None = None  # e.g. "http://127.0.0.1:PORT" for a local emulator
    operation_timeout_s: float = 60.0  # how long launch waits for inserts before returning "pending"

    @property
    def machine_types(self) -> list[str]:
        """The machine types a launch may name."""
        return [self.machine_type] if isinstance(self.machine_type, str) else list(self.machine_type)


def client_kwargs(endpoint: str | None) -> dict[str, Any]:
    """What a compute_v1 client is built with: nothing (Google's endpoint, Application Default
    Credentials), or for another `endpoint` (an emulator) REST with anonymous credentials."""
    if not endpoint:
        return {}
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return {"transport": "rest", "client_options": ClientOptions(api_endpoint=endpoint),
            "credentials": AnonymousCredentials()}


def _short(request_id: str) -> str:
    return hashlib.sha1(request_id.encode()).hexdigest()[:8]


def instance_name(pool: str, request_id: str, n: int) -> str:
    """A valid, deterministic GCE name: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 chars."""
    p = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", pool.lower())).strip("-")[:40] or "pool"
    return f"det-{p}-{_short(request_id)}-{n}"


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1] if url else ""


class GceProvisioner:
    """`Provisioner` over one project; pass clients to reuse them (tests, pooling)."""

    def __init__(
        self, config: GceConfig, *, instances_client: Any | None = None, operations_client: Any | None = None
    ) -> None:
        if not config.zones:
            raise InvalidConfig("gce: zones must name at least one zone")
        if config.provisioning_model not in ("STANDARD", "SPOT"):
            raise InvalidConfig(f"gce: provisioning_model must be STANDARD or SPOT, got {config.provisioning_model!r}")
        if config.gpu_count and not config.gpu_type:
            raise InvalidConfig("gce: gpu_count set without gpu_type")
        self.config = config
        self._instances = instances_client
        self._operations = operations_client
        self._zone_of: dict[str, str] = {}  # instance name -> zone, learned from launch/list

    # -- clients --------------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        return client_kwargs(self.config.endpoint)

    @property
    def instances(self) -> Any:
        if self._instances is None:
            from google.cloud import compute_v1

            self._instances = compute_v1.InstancesClient(**self._client_kwargs())
        return self._instances

    @property
    def operations(self) -> Any:
        if self._operations is None:
            from google.cloud import compute_v1

            self._operations = compute_v1.ZoneOperationsClient(**self._client_kwargs())
        return self._operations

    # -- launch ---------------------------------------------------------------------------

    def launch(self, req: LaunchRequest) -> list[Instance]:
        validate_request(req)
        cfg = self.config
        zone = req.zone or cfg.zones[0]
        kw = {"zone": zone, "instance_type": req.instance_type}
        if zone not in cfg.zones:
            raise InvalidConfig(f"zone {zone!r} is not in this pool's zones {cfg.zones}", **kw)
        if req.instance_type not in cfg.machine_types:
            raise InvalidConfig(f"machine type {req.instance_type!r} is not one of this pool's "
                                f"{', '.join(cfg.machine_types)}", **kw)
        spot = req.spot  # the request decides, so the autoscaler can fall back to STANDARD
        names = [instance_name(req.pool, req.request_id, n) for n in range(req.count)]
        # Instances created before a failure carry the request's labels: the next list finds them.
        pending: list[tuple[str, Any]] = []
        for name in names:
            op = self._insert(self._body(req, name, zone, spot), zone, req.instance_type)
            if op is not None:  # None: it already existed (a retried request)
                pending.append((name, op))
        deadline = time.monotonic() + self.config.operation_timeout_s
        unfinished = {name for name, op in pending if not self._wait(op, zone, req.instance_type, deadline)}
        out: list[Instance] = []
        for name in names:
            got = None if name in unfinished else self._get(name, zone)
            out.append(got or self._placeholder(req, name, zone, spot))
        return out

    def _placeholder(self, req: LaunchRequest, name: str, zone: str, spot: bool) -> Instance:
        """An instance whose insert is still in progress (or not yet visible to get)."""
        labels = {k: sanitize_label(v) for k, v in instance_tags(req).items()}
        return Instance(name, name, "pending", zone, req.instance_type, spot, time.time(), labels)

    def _body(self, req: LaunchRequest, name: str, zone: str, spot: bool) -> Any:
        from google.cloud import compute_v1

        cfg = self.config
        labels = {sanitize_label(k): sanitize_label(v) for k, v in cfg.labels.items()}
        labels.update({k: sanitize_label(v) for k, v in instance_tags(req).items()})
        sched = compute_v1.Scheduling()
        if spot:
            sched.provisioning_model = "SPOT"
            sched.instance_termination_action = "DELETE"
            sched.automatic_restart = False
            sched.on_host_maintenance = "TERMINATE"
        elif cfg.gpu_count:
            sched.provisioning_model = "STANDARD"
            sched.on_host_maintenance = "TERMINATE"  # GPU VMs cannot live-migrate
            sched.automatic_restart = True
        nic = compute_v1.NetworkInterface(network=cfg.network)
        if cfg.subnetwork:
            nic.subnetwork = cfg.subnetwork
        if cfg.external_ip:
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        inst = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{req.instance_type}",
            labels=labels,
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key="startup-script", value=req.user_data)]),
            scheduling=sched,
            network_interfaces=[nic],
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=cfg.image,
                        disk_size_gb=cfg.disk_gb,
                        disk_type=f"zones/{zone}/diskTypes/{cfg.disk_type}",
                        labels=labels,
                    ),
                )
            ],
        )
        if cfg.gpu_count and cfg.gpu_type:
            inst.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{cfg.gpu_type}",
                    accelerator_count=cfg.gpu_count,
                )
            ]
        if cfg.service_account:
            inst.service_accounts = [compute_v1.ServiceAccount(email=cfg.service_account, scopes=list(cfg.scopes))]
        return inst

    def _insert(self, body: Any, zone: str, machine_type: str) -> Any | None:
        """Start one insert; None when the name already exists (idempotent retry)."""
        from google.api_core import exceptions as gex

        try:
            op = self.instances.insert_unary(project=self.config.project, zone=zone, instance_resource=body)
        except gex.Conflict:
            return None
        except Exception as exc:
            raise map_error(exc, zone=zone, instance_type=machine_type) from exc
        self._zone_of[body.name] = zone
        return op

    def _wait(self, op: Any, zone: str, machine_type: str, deadline: float) -> bool:
        """Wait (server-side long poll, bounded) for an operation; True when DONE, raising the
        operation's error if it failed. A launch returns at the deadline instead of blocking a
        tick: unfinished inserts come back as "pending" and the next list shows the truth."""
        with translated(zone=zone, instance_type=machine_type):
            while str(getattr(op.status, "name", op.status)) != "DONE":
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                op = self.operations.wait(
                    project=self.config.project, zone=zone, operation=op.name, timeout=max(1.0, left)
                )
        err = operation_error(op, zone=zone, instance_type=machine_type)
        if err is not None:
            raise err
        return True

    def _get(self, name: str, zone: str) -> Instance | None:
        from google.api_core import exceptions as gex

        try:
            with translated(zone=zone):
                raw = self.instances.get(project=self.config.project, zone=zone, instance=name)
        except ProvisionerError as err:
            if isinstance(err.__cause__, gex.NotFound):
                return None
            raise
        return self._to_instance(raw)

    # -- list -----------------------------------------------------------------------------

    def list_instances(self, cluster_id: str, pool: str) -> list[Instance]:
        flt = (f'(labels.{TAG_CLUSTER} = "{sanitize_label(cluster_id)}") '
               f'AND (labels.{TAG_POOL} = "{sanitize_label(pool)}")')
        out: list[Instance] = []
        with translated():
            pager = self.instances.aggregated_list(request={"project": self.config.project, "filter": flt})
            for _scope, scoped in pager:
                for raw in scoped.instances:
                    inst = self._to_instance(raw)
                    self._zone_of[inst.instance_id] = inst.zone
                    out.append(inst)
        return out

    # -- terminate ------------------------------------------------------------------------

    def terminate(self, instance_ids: list[str]) -> None:
        """Delete by name; names already gone are not an error. Does not wait for completion:
        the next list shows STOPPING and then nothing."""
        for name in dict.fromkeys(instance_ids):
            zones = [self._zone_of[name]] if name in self._zone_of else list(self.config.zones)
            for zone in zones:
                if self._delete(name, zone):
                    self._zone_of.pop(name, None)
                    break

    def _delete(self, name: str, zone: str) -> bool:
        from google.api_core import exceptions as gex

        try:
            op = self.instances.delete_unary(project=self.config.project, zone=zone, instance=name)
        except gex.NotFound:
            return False
        except Exception as exc:
            raise map_error(exc, zone=zone) from exc
        err = operation_error(op, zone=zone)
        if err is not None and not (err.code or "").startswith("RESOURCE_NOT_FOUND"):
            raise err
        return True

    # -- mapping --------------------------------------------------------------------------

    @staticmethod
    def _to_instance(raw: Any) -> Instance:
        sched = raw.scheduling
        created = raw.creation_timestamp
        try:
            launched = datetime.fromisoformat(created).timestamp() if created else time.time()
        except ValueError:
            launched = time.time()
        return Instance(
            instance_id=raw.name,
            name=raw.name,
            state=_STATES.get(raw.status, "pending"),
            zone=_last(raw.zone),
            instance_type=_last(raw.machine_type),
            spot=sched.provisioning_model == "SPOT" or bool(sched.preemptible),
            launched_at=launched,
            tags=dict(raw.labels),
        )
