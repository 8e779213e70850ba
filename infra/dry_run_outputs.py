"""What the dry run's mocks answer: plausible ids and outputs per resource type, and the data
sources the programs read (availability zones, the agent AMI). Addresses are documentation ranges
(RFC 5737), the AWS account is the documentation one, so nothing looks like a real deployment."""

from __future__ import annotations

import hashlib
from typing import Any

PUBLIC_IP = "198.51.100.10"
MOCK_AMI = "ami-0123456789abcdef0"


def _h(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:12]


def _aws(typ: str, name: str, inputs: dict[str, Any], region: str, account: str) -> tuple[str, dict[str, Any]]:
    prefixes = {"aws:ec2/vpc:Vpc": "vpc", "aws:ec2/subnet:Subnet": "subnet",
                "aws:ec2/securityGroup:SecurityGroup": "sg", "aws:ec2/internetGateway:InternetGateway": "igw",
                "aws:ec2/routeTable:RouteTable": "rtb", "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce",
                "aws:ec2/eip:Eip": "eipalloc", "aws:ec2/instance:Instance": "i"}
    if typ in prefixes:
        rid = f"{prefixes[typ]}-{_h(name)}"
        out: dict[str, Any] = {"arn": f"arn:aws:ec2:{region}:{account}:{prefixes[typ]}/{rid}"}
        if typ == "aws:ec2/instance:Instance":
            out.update(privateIp="10.0.0.10", publicIp=PUBLIC_IP)
        if typ == "aws:ec2/eip:Eip":
            out.update(publicIp=PUBLIC_IP, allocationId=rid)
        return rid, out
    if typ in ("aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile"):
        physical = inputs.get("name") or f"{name}-{_h(name)[:7]}"
        kind = "role" if typ.endswith("Role") else "instance-profile"
        return physical, {"name": physical, "arn": f"arn:aws:iam::{account}:{kind}/{physical}"}
    if typ == "aws:s3/bucket:Bucket":
        bucket = inputs.get("bucket") or f"{inputs.get('bucketPrefix', name)}{_h(name)}"
        return bucket, {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}
    if typ == "aws:rds/instance:Instance":
        address = f"{name}.{_h(name)}.{region}.rds.amazonaws.com"
        return name, {"address": address, "endpoint": f"{address}:5432", "port": 5432,
                      "arn": f"arn:aws:rds:{region}:{account}:db:{name}"}
    if typ == "aws:rds/subnetGroup:SubnetGroup":
        return name, {"name": inputs.get("name") or name}
    return f"{name}-id", {}


def _gcp(typ: str, name: str, inputs: dict[str, Any], region: str, project: str) -> tuple[str, dict[str, Any]]:
    physical = inputs.get("name") or name
    if typ == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        rid = f"projects/{project}/serviceAccounts/{email}"
        return rid, {"email": email, "name": rid, "member": f"serviceAccount:{email}"}
    paths = {"gcp:compute/network:Network": f"projects/{project}/global/networks/{physical}",
             "gcp:compute/subnetwork:Subnetwork": f"projects/{project}/regions/{region}/subnetworks/{physical}",
             "gcp:compute/instance:Instance": f"projects/{project}/zones/{inputs.get('zone')}/instances/{physical}"}
    if typ in paths:
        return paths[typ], {"name": physical, "selfLink": f"https://www.googleapis.com/compute/v1/{paths[typ]}"}
    if typ == "gcp:compute/address:Address":
        return physical, {"name": physical, "address": PUBLIC_IP}
    if typ == "gcp:storage/bucket:Bucket":
        return physical, {"name": physical, "url": f"gs://{physical}"}
    if typ == "gcp:sql/databaseInstance:DatabaseInstance":
        return physical, {"name": physical, "privateIpAddress": "10.20.0.3",
                          "connectionName": f"{project}:{region}:{physical}"}
    return physical, {"name": physical}


def mock_outputs(typ: str, name: str, inputs: dict[str, Any], *, region: str, project: str | None,
                 account: str) -> tuple[str, dict[str, Any]]:
    if typ.startswith("pulumi:providers:"):
        return f"{name}-provider", {}
    if typ.startswith("aws:"):
        return _aws(typ, name, inputs, region, account)
    if typ.startswith("gcp:"):
        return _gcp(typ, name, inputs, region, project or "project")
    return f"{name}-id", {}


def mock_call(token: str, args: dict[str, Any], *, region: str, project: str | None) -> dict[str, Any]:
    if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
        names = [f"{region}{z}" for z in "abc"]
        return {"id": region, "names": names, "zoneIds": [f"use1-az{i}" for i in range(1, 4)]}
    if token == "aws:ec2/getAmi:getAmi":
        return {"id": MOCK_AMI, "imageId": MOCK_AMI, "name": "det-agent (dry run: the newest baked image)"}
    return {}
