"""EC2 provisioner (boto3): launch, list by tag, terminate.

Every launch is all-or-nothing (MinCount = MaxCount) so a partial spot fill never hides a
capacity problem, carries a ClientToken (the launch request id) so a retried call after a
timeout cannot double-launch, and hardens the instance: IMDSv2 required, shutdown means
terminate, root volume deleted on termination, tags on instance and volume. Zone/type
failover and spot fallback belong to the autoscaler; this module makes one attempt and says
precisely why it failed (see ec2_errors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from controlplane.state.instance import InstanceState
from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Instance,
    InvalidConfig,
    LaunchRequest,
    instance_tags,
    validate_request,
)
from provisioners.ec2_errors import map_error, translated

# EC2 instance-state-name -> our state. shutting-down/terminated are excluded from listing.
_STATES: dict[str, InstanceState] = {"pending": "pending", "running": "running", "stopping": "stopping",
                                     "stopped": "stopped"}
_LISTED_STATES = list(_STATES)
_TERMINATE_BATCH = 1000  # TerminateInstances limit per call


@dataclass(frozen=True)
class Ec2Config:
    """A pool's AWS provider settings (Determined's field names where they exist)."""

    region: str
    instance_type: str | list[str]
    image_id: str
    zones: list[str] = field(default_factory=list)
    spot: bool = False
    spot_fallback_to_on_demand: bool = False
    spot_max_price: str | None = None
    subnet_id: str | None = None
    zone_subnets: dict[str, str] = field(default_factory=dict)  # zone -> subnet, for multi-AZ VPCs
    security_group_ids: list[str] = field(default_factory=list)
    key_name: str | None = None
    endpoint_url: str | None = None
    iam_instance_profile: str | None = None  # ARN or name
    root_volume_gb: int = 200
    root_volume_type: str = "gp3"
    extra_tags: dict[str, str] = field(default_factory=dict)

    @property
    def instance_types(self) -> list[str]:
        """The configured types in failover order."""
        return [self.instance_type] if isinstance(self.instance_type, str) else list(self.instance_type)


class Ec2Provisioner:
    """`Provisioner` over one region; pass `client` to reuse a boto3 EC2 client."""

    page_size: int = 500  # DescribeInstances page; a class attribute so tests can shrink it

    def __init__(self, config: Ec2Config, client: Any | None = None) -> None:
        if not config.instance_types:
            raise InvalidConfig("ec2: instance_type must name at least one type")
        if config.root_volume_gb < 1:
            raise InvalidConfig(f"ec2: root_volume_gb must be positive, got {config.root_volume_gb}")
        self.config = config
        self._client = client
        self._root_device: str | None = None

    @property
    def client(self) -> Any:
        """Created on first use so that importing/constructing costs nothing."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "ec2",
                region_name=self.config.region,
                endpoint_url=self.config.endpoint_url,
                config=Config(
                    retries={"mode": "standard", "max_attempts": 3},
                    connect_timeout=10,
                    read_timeout=60,
                ),
            )
        return self._client

    # -- launch ---------------------------------------------------------------------------

    def launch(self, req: LaunchRequest) -> list[Instance]:
        validate_request(req)
        cfg = self.config
        kw = {"zone": req.zone, "instance_type": req.instance_type}
        if req.instance_type not in cfg.instance_types:
            raise InvalidConfig(f"instance type {req.instance_type!r} is not in this pool's list", **kw)
        if req.zone is not None and cfg.zones and req.zone not in cfg.zones:
            raise InvalidConfig(f"zone {req.zone!r} is not in this pool's zones {cfg.zones}", **kw)
        with translated(**kw):
            existing = self._describe(self._tag_filters(req.cluster_id, req.pool, req.request_id))
            if existing:  # a retried request that already launched: converge, don't append
                return existing
            resp = self.client.run_instances(**self._run_params(req))
        return [self._to_instance(raw) for raw in resp.get("Instances", [])]

    def _run_params(self, req: LaunchRequest) -> dict[str, Any]:
        cfg = self.config
        tags = {"Name": f"det-{req.pool}-{req.request_id[:8]}", **cfg.extra_tags, **instance_tags(req)}
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        params: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": req.instance_type,
            "MinCount": req.count,
            "MaxCount": req.count,
            "UserData": req.user_data,  # boto3 base64-encodes it
            "ClientToken": req.request_id[:64],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 2,  # the agent may run in a bridged container
            },
            "BlockDeviceMappings": [
                {
                    "DeviceName": self._root_device_name(),
                    "Ebs": {
                        "VolumeSize": cfg.root_volume_gb,
                        "VolumeType": cfg.root_volume_type,
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if req.zone:
            params["Placement"] = {"AvailabilityZone": req.zone}
        subnet = cfg.zone_subnets.get(req.zone or "", cfg.subnet_id)
        if subnet:
            params["SubnetId"] = subnet
        if cfg.security_group_ids:
            params["SecurityGroupIds"] = list(cfg.security_group_ids)
        if cfg.key_name:
            params["KeyName"] = cfg.key_name
        if cfg.iam_instance_profile:
            key = "Arn" if cfg.iam_instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: cfg.iam_instance_profile}
        if req.spot:
            spot: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if cfg.spot_max_price:
                spot["MaxPrice"] = cfg.spot_max_price
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return params

    def _root_device_name(self) -> str:
        """The AMI's own root device (/dev/xvda vs /dev/sda1), so the size override applies."""
        if self._root_device is None:
            images = self.client.describe_images(ImageIds=[self.config.image_id]).get("Images", [])
            if not images:
                raise InvalidConfig(f"image {self.config.image_id!r} not found", code="InvalidAMIID.NotFound")
            self._root_device = str(images[0].get("RootDeviceName") or "/dev/sda1")
        return self._root_device

    # -- list -----------------------------------------------------------------------------

    def list_instances(self, cluster_id: str, pool: str) -> list[Instance]:
        with translated():
            return self._describe(self._tag_filters(cluster_id, pool))

    @staticmethod
    def _tag_filters(cluster_id: str, pool: str, request_id: str | None = None) -> list[dict[str, Any]]:
        filters = [
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]},
            {"Name": f"tag:{TAG_POOL}", "Values": [pool]},
            {"Name": "instance-state-name", "Values": _LISTED_STATES},
        ]
        if request_id is not None:
            filters.append({"Name": f"tag:{TAG_REQUEST}", "Values": [request_id]})
        return filters

    def _describe(self, filters: list[dict[str, Any]]) -> list[Instance]:
        out: list[Instance] = []
        pages = self.client.get_paginator("describe_instances").paginate(
            Filters=filters, PaginationConfig={"PageSize": self.page_size}
        )
        for page in pages:
            for reservation in page.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    if raw.get("State", {}).get("Name") in _STATES:
                        out.append(self._to_instance(raw))
        return out

    # -- terminate ------------------------------------------------------------------------

    def terminate(self, instance_ids: list[str]) -> None:
        """Idempotent: ids that are already gone are not an error."""
        ids = list(dict.fromkeys(instance_ids))
        for i in range(0, len(ids), _TERMINATE_BATCH):
            batch = ids[i : i + _TERMINATE_BATCH]
            try:
                self.client.terminate_instances(InstanceIds=batch)
            except Exception as exc:
                err = map_error(exc)
                if not (err.code or "").startswith("InvalidInstanceID"):
                    raise err from exc
                # One unknown id fails the whole call: retry one by one, skipping the missing.
                for iid in batch:
                    self._terminate_one(iid)

    def _terminate_one(self, instance_id: str) -> None:
        try:
            self.client.terminate_instances(InstanceIds=[instance_id])
        except Exception as exc:
            err = map_error(exc)
            if not (err.code or "").startswith("InvalidInstanceID"):
                raise err from exc

    # -- mapping --------------------------------------------------------------------------

    @staticmethod
    def _to_instance(raw: dict[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", []) or []}
        launched = raw.get("LaunchTime")
        return Instance(
            instance_id=raw["InstanceId"],
            name=tags.get("Name", raw["InstanceId"]),
            state=_STATES.get(raw.get("State", {}).get("Name", ""), "terminated"),
            zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
            instance_type=raw.get("InstanceType", ""),
            spot=raw.get("InstanceLifecycle") == "spot",
            launched_at=launched.timestamp() if launched is not None else time.time(),
            tags=tags,
        )
