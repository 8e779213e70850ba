"""`det agent-image bake gcp`: a Compute Engine image with the agent, made from a builder instance.

The flow: insert the builder from the base image (the bake's temporary public key in its `ssh-keys`
metadata, project-wide keys blocked, labels det-role=builder and det-bake=<id>), wait until it runs,
provision it over SSH, stop it, `images.insert` from its boot disk (labelled, in the image family),
wait until the image is READY. Whatever happens (a failing step, an SDK error, Ctrl-C), `_cleanup`
then deletes the builder (its disk goes with it) and an image that never became ready.

Every client call goes through `_gcp(action)`, the one place where Compute Engine errors (classified
by `provisioners.gce_errors`, operation errors included) become the bake's `CloudError`. The
clients use REST, so `endpoint` can point at the tests' Compute endpoint; operations are polled with
our own operations clients (the extended operations poll Google even then).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from agent_image.bake import steps as plan_steps
from agent_image.bake.common import (
    BAKE_TAG,
    DEFAULT_TIMEOUTS,
    ROLE_TAG,
    BakeResult,
    Timeouts,
    image_name,
    image_tags,
    new_bake_id,
    provision_builder,
    removing,
)
from agent_image.bake.errors import BakeError, CloudError, translated
from agent_image.bake.ssh import Emit, SshTarget, generate_key, public_line

SshEndpoint = Callable[[Any], tuple[str, int]]


@dataclass(frozen=True)
class GcpBakeOptions:
    base_image: str
    project: str
    zone: str
    machine_type: str = "e2-standard-4"
    network: str = "global/networks/default"
    subnetwork: str | None = None
    nvidia_driver: bool = False
    endpoint: str | None = None  # e.g. http://127.0.0.1:PORT for the tests' Compute endpoint
    ssh_user: str = "ubuntu"
    disk_gb: int = 30
    family: str | None = "det-agent"


class Clients:
    """The four Compute clients a bake uses, made on first use."""

    def __init__(self, endpoint: str | None) -> None:
        self._endpoint = endpoint
        self._made: dict[str, Any] = {}

    def _get(self, name: str) -> Any:
        if name not in self._made:
            from google.cloud import compute_v1

            from provisioners.gce import client_kwargs

            with _gcp("creating the Compute Engine clients"):
                self._made[name] = getattr(compute_v1, name)(**client_kwargs(self._endpoint))
        return self._made[name]

    @property
    def instances(self) -> Any:
        return self._get("InstancesClient")

    @property
    def images(self) -> Any:
        return self._get("ImagesClient")

    @property
    def zone_operations(self) -> Any:
        return self._get("ZoneOperationsClient")

    @property
    def global_operations(self) -> Any:
        return self._get("GlobalOperationsClient")


@dataclass
class _Made:
    """What this bake created so far: exactly what the cleanup removes."""

    instance: str | None = None
    image: str | None = None
    image_ready: bool = False
    left: list[str] = field(default_factory=list)  # what the cleanup could not remove


def _gcp(action: str) -> AbstractContextManager[None]:
    from provisioners.gce_errors import map_error

    return translated(action, map_error)


def _label(value: str) -> str:
    from provisioners.base import sanitize_label

    return sanitize_label(value)


def external_address(instance: Any) -> tuple[str, int]:
    """The builder's external IPv4 and port 22: the default `ssh_endpoint`."""
    for nic in instance.network_interfaces:
        for access in nic.access_configs:
            if access.nat_i_p:
                return access.nat_i_p, 22
    raise BakeError(f"the builder {instance.name} has no external address yet")


def bake(opts: GcpBakeOptions, *, emit: Emit = print, ssh_endpoint: SshEndpoint = external_address,
         clients: Clients | None = None, client_key: asyncssh.SSHKey | None = None, source: bytes | None = None,
         timeouts: Timeouts = DEFAULT_TIMEOUTS) -> BakeResult:
    """Bake an agent image in `opts.project`; returns its name as the id. Cleans up whatever happens."""
    steps = plan_steps.plan("gcp", source=source if source is not None else plan_steps.source_archive(),
                            nvidia_driver=opts.nvidia_driver)
    gce = clients or Clients(opts.endpoint)
    key = client_key or generate_key()
    bake_id = new_bake_id()
    made = _Made()
    emit(f"baking an agent image from {opts.base_image} in {opts.project}/{opts.zone} (bake {bake_id})")
    try:
        return _bake(gce, opts, steps, key, bake_id, made, emit, ssh_endpoint, timeouts)
    finally:
        _cleanup(gce, opts, made, emit, timeouts)


def _builder_body(opts: GcpBakeOptions, name: str, key: asyncssh.SSHKey, bake_id: str) -> Any:
    from google.cloud import compute_v1

    nic = compute_v1.NetworkInterface(
        network=opts.network, access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")])
    if opts.subnetwork:
        nic.subnetwork = opts.subnetwork
    items = {"ssh-keys": f"{opts.ssh_user}:{public_line(key)}", "block-project-ssh-keys": "TRUE",
             # The guest agent publishes the host keys there: the bake pins them.
             "enable-guest-attributes": "TRUE"}
    return compute_v1.Instance(
        name=name, machine_type=f"zones/{opts.zone}/machineTypes/{opts.machine_type}",
        labels={ROLE_TAG: "builder", BAKE_TAG: bake_id},
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in items.items()]),
        network_interfaces=[nic],
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True,
            initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=opts.base_image,
                                                                      disk_size_gb=opts.disk_gb))])


def _bake(gce: Clients, opts: GcpBakeOptions, steps: list[plan_steps.Step], key: asyncssh.SSHKey, bake_id: str,
          made: _Made, emit: Emit, ssh_endpoint: SshEndpoint, timeouts: Timeouts) -> BakeResult:
    name = f"det-bake-{bake_id}"
    with _gcp(f"creating the builder ({opts.machine_type} from {opts.base_image})"):
        op = gce.instances.insert_unary(project=opts.project, zone=opts.zone,
                                        instance_resource=_builder_body(opts, name, key, bake_id))
    made.instance = name
    _wait_zone(gce, opts, op, "creating the builder", timeouts.instance_wait_s)
    emit(f"builder {name} created; waiting for it to run")
    instance = _wait_status(gce, opts, name, "RUNNING", timeouts)

    host, port = ssh_endpoint(instance)
    target = SshTarget(host, port, opts.ssh_user, key, _host_keys(gce, opts, name, emit, timeouts))
    provision_builder(target, steps, emit, timeouts)

    emit(f"stopping the builder {name}")
    with _gcp(f"stopping the builder {name}"):
        op = gce.instances.stop_unary(project=opts.project, zone=opts.zone, instance=name)
    _wait_zone(gce, opts, op, "stopping the builder", timeouts.instance_wait_s)
    instance = _wait_status(gce, opts, name, "TERMINATED", timeouts)
    disk = next((d.source for d in instance.disks if d.boot), "")
    if not disk:
        raise BakeError(f"the builder {name} has no boot disk to make the image from")

    tags = image_tags(bake_id, opts.base_image, opts.nvidia_driver)
    image = image_name(bake_id, tags["det-version"])
    from google.cloud import compute_v1

    labels = {k: _label(v) for k, v in tags.items()}
    labels["det-base-image"] = _label(opts.base_image.rsplit("/", 1)[-1])  # the image or family name fits a label
    body = compute_v1.Image(name=image, source_disk=disk, labels=labels,
                            description=f"controlplane agent image ({opts.base_image})")
    if opts.family:
        body.family = opts.family
    with _gcp("creating the image"):
        op = gce.images.insert_unary(project=opts.project, image_resource=body)
    made.image = image
    emit(f"image {image} is being created; waiting for it to become ready")
    _wait_global(gce, opts, op, "creating the image", timeouts.image_wait_s)
    deadline = time.monotonic() + timeouts.image_wait_s
    while True:
        with _gcp(f"reading the image {image}"):
            status = str(gce.images.get(project=opts.project, image=image).status)
        if status == "READY":
            break
        if status == "FAILED" or time.monotonic() >= deadline:
            raise BakeError(f"the image {image} is {status}, not READY")
        time.sleep(timeouts.poll_s)
    made.image_ready = True
    return BakeResult(f"projects/{opts.project}/global/images/{image}", bake_id, image, tags)


def _op_status(op: Any) -> str:
    return str(getattr(op.status, "name", op.status))


def _check_op(op: Any, action: str) -> None:
    from provisioners.gce_errors import operation_error

    err = operation_error(op)
    if err is not None:
        raise CloudError(action, err.provider_message, err.code)


def _wait_op(op: Any, wait: Callable[[str], Any], action: str, budget_s: float) -> None:
    """Wait on `op` (`wait(name)` is the zone's or the global operations' long poll) until DONE,
    within `budget_s`; an error it finished with is the bake's CloudError."""
    deadline = time.monotonic() + budget_s
    with _gcp(action):
        while _op_status(op) != "DONE":
            if time.monotonic() >= deadline:
                raise BakeError(f"{action} did not finish within {budget_s:g} s")
            op = wait(op.name)
    _check_op(op, action)


def _wait_zone(gce: Clients, opts: GcpBakeOptions, op: Any, action: str, budget_s: float) -> None:
    _wait_op(op, lambda name: gce.zone_operations.wait(project=opts.project, zone=opts.zone, operation=name),
             action, budget_s)


def _wait_global(gce: Clients, opts: GcpBakeOptions, op: Any, action: str, budget_s: float) -> None:
    _wait_op(op, lambda name: gce.global_operations.wait(project=opts.project, operation=name), action, budget_s)


def _wait_status(gce: Clients, opts: GcpBakeOptions, name: str, want: str, timeouts: Timeouts) -> Any:
    deadline = time.monotonic() + timeouts.instance_wait_s
    while True:
        with _gcp(f"reading the builder {name}"):
            instance = gce.instances.get(project=opts.project, zone=opts.zone, instance=name)
        if str(instance.status) == want:
            return instance
        if time.monotonic() >= deadline:
            raise BakeError(f"the builder {name} is {instance.status}, not {want}, "
                            f"after {timeouts.instance_wait_s:g} s")
        time.sleep(timeouts.poll_s)


def _host_keys(gce: Clients, opts: GcpBakeOptions, name: str, emit: Emit, timeouts: Timeouts) -> tuple[str, ...]:
    """The builder's host keys from its guest attributes (`hostkeys/`, published by the guest agent a
    little after boot); none within host_key_wait_s: accept on first use."""
    from google.api_core import exceptions as gex

    deadline = time.monotonic() + timeouts.host_key_wait_s
    while True:
        try:
            with _gcp(f"reading the builder {name}'s host keys"):
                from google.cloud import compute_v1

                attrs = gce.instances.get_guest_attributes(request=compute_v1.GetGuestAttributesInstanceRequest(
                    project=opts.project, zone=opts.zone, instance=name, query_path="hostkeys/"))
            keys = tuple(f"{item.key} {item.value}" for item in attrs.query_value.items if item.value)
        except CloudError as e:
            if not isinstance(e.__cause__, gex.NotFound):  # NotFound: not published yet
                raise
            keys = ()
        if keys:
            emit(f"pinning the builder's host key{'s' if len(keys) > 1 else ''} from its guest attributes")
            return keys
        if time.monotonic() >= deadline:
            return ()
        time.sleep(timeouts.poll_s)


def _cleanup(gce: Clients, opts: GcpBakeOptions, made: _Made, emit: Emit, timeouts: Timeouts) -> None:
    if made.image and not made.image_ready:
        with removing(made.left, f"the unfinished image {made.image}", emit):
            emit(f"cleanup: deleting the unfinished image {made.image}")
            with _gcp("deleting the image"):
                op = gce.images.delete_unary(project=opts.project, image=made.image)
            _wait_global(gce, opts, op, "deleting the image", timeouts.instance_wait_s)
    if made.instance:
        with removing(made.left, f"the builder {made.instance}", emit):
            emit(f"cleanup: deleting the builder {made.instance}")
            with _gcp("deleting the builder"):
                op = gce.instances.delete_unary(project=opts.project, zone=opts.zone, instance=made.instance)
            _wait_zone(gce, opts, op, "deleting the builder", timeouts.instance_wait_s)
