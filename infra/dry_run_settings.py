"""The settings of a planned resource that a reviewer checks before saying yes: who may reach
what, what is encrypted, what is public, which IAM actions on which resources. Read from the
resource's inputs as the engine would get them (Pulumi's wire names, camelCase)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

SECRET = "[secret]"


def _get(inputs: dict[str, Any], path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        if isinstance(value, list):
            value = value[0] if value else None
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _policy(doc: Any) -> list[str]:
    """One line per statement: effect, actions, resources, condition."""
    try:
        parsed = json.loads(doc) if isinstance(doc, str) else doc
        statements = parsed["Statement"]
    except (ValueError, TypeError, KeyError):
        return [str(doc)]
    lines = []
    for s in statements:
        actions = s.get("Action")
        resources = s.get("Resource", s.get("Principal"))
        line = f"{s.get('Effect')} {','.join(actions) if isinstance(actions, list) else actions}"
        line += f" on {','.join(resources) if isinstance(resources, list) else resources}"
        if s.get("Condition"):
            line += f" if {json.dumps(s['Condition'], sort_keys=True)}"
        lines.append(line)
    return lines


def _rule(inputs: dict[str, Any]) -> dict[str, Any]:
    proto = inputs.get("ipProtocol")
    ports = "all" if proto == "-1" else f"{inputs.get('fromPort')}-{inputs.get('toPort')}"
    source = inputs.get("cidrIpv4") or inputs.get("cidrIpv6") or inputs.get("referencedSecurityGroupId")
    return {"protocol": "all" if proto == "-1" else proto, "ports": ports, "peer": source}


def _gcp_instance(inputs: dict[str, Any]) -> dict[str, Any]:
    nics = inputs.get("networkInterfaces") or [{}]
    sa = inputs.get("serviceAccount") or {}
    return {"machine_type": inputs.get("machineType"), "image": _get(inputs, "bootDisk.initializeParams.image"),
            "external_ip": bool(nics[0].get("accessConfigs")), "service_account": sa.get("email"),
            "scopes": sa.get("scopes"), "shielded": inputs.get("shieldedInstanceConfig"),
            "os_login": _get(inputs, "metadata.enable-oslogin"),
            "startup_script": SECRET if "startup-script" in (inputs.get("metadata") or {}) else None}


_PATHS: dict[str, list[tuple[str, str]]] = {
    "pulumi:providers:aws": [("region", "region")],
    "pulumi:providers:gcp": [("project", "project"), ("region", "region")],
    "aws:ec2/vpc:Vpc": [("cidr", "cidrBlock")],
    "aws:ec2/subnet:Subnet": [("cidr", "cidrBlock"), ("public_ip_on_launch", "mapPublicIpOnLaunch")],
    "aws:ec2/routeTable:RouteTable": [("routes", "routes")],
    "aws:ec2/securityGroup:SecurityGroup": [("description", "description"), ("inline_ingress", "ingress")],
    "aws:ec2/instance:Instance": [
        ("instance_type", "instanceType"), ("ami", "ami"), ("http_tokens", "metadataOptions.httpTokens"),
        ("hop_limit", "metadataOptions.httpPutResponseHopLimit"), ("root_encrypted", "rootBlockDevice.encrypted"),
        ("key_name", "keyName"), ("instance_profile", "iamInstanceProfile")],
    "aws:s3/bucket:Bucket": [("bucket_prefix", "bucketPrefix"), ("force_destroy", "forceDestroy")],
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": [
        ("block_public_acls", "blockPublicAcls"), ("block_public_policy", "blockPublicPolicy"),
        ("ignore_public_acls", "ignorePublicAcls"), ("restrict_public_buckets", "restrictPublicBuckets")],
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": [
        ("sse_algorithm", "rules.applyServerSideEncryptionByDefault.sseAlgorithm")],
    "aws:s3/bucketVersioning:BucketVersioning": [("versioning", "versioningConfiguration.status")],
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": [("object_ownership", "rule.objectOwnership")],
    "aws:rds/instance:Instance": [
        ("engine", "engine"), ("storage_encrypted", "storageEncrypted"), ("publicly_accessible", "publiclyAccessible"),
        ("deletion_protection", "deletionProtection"), ("skip_final_snapshot", "skipFinalSnapshot")],
    "gcp:compute/subnetwork:Subnetwork": [("cidr", "ipCidrRange"), ("private_google_access", "privateIpGoogleAccess")],
    "gcp:compute/firewall:Firewall": [
        ("direction", "direction"), ("source_ranges", "sourceRanges"), ("source_service_accounts",
                                                                          "sourceServiceAccounts"),
        ("target_service_accounts", "targetServiceAccounts"), ("allow", "allows")],
    "gcp:storage/bucket:Bucket": [
        ("uniform_access", "uniformBucketLevelAccess"), ("public_access_prevention", "publicAccessPrevention"),
        ("versioning", "versioning.enabled"), ("location", "location")],
    "gcp:projects/iAMMember:IAMMember": [("role", "role"), ("member", "member"), ("condition", "condition.expression")],
    "gcp:serviceaccount/iAMMember:IAMMember": [("role", "role"), ("member", "member")],
    "gcp:storage/bucketIAMMember:BucketIAMMember": [("role", "role"), ("member", "member")],
    "gcp:serviceaccount/account:Account": [("account_id", "accountId")],
    "gcp:sql/databaseInstance:DatabaseInstance": [
        ("version", "databaseVersion"), ("ipv4_enabled", "settings.ipConfiguration.ipv4Enabled"),
        ("ssl_mode", "settings.ipConfiguration.sslMode"), ("deletion_protection", "deletionProtection")],
}

_SPECIAL: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": lambda i: {"ingress": _rule(i)},
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": lambda i: {"egress": _rule(i)},
    "aws:iam/rolePolicy:RolePolicy": lambda i: {"policy": _policy(i.get("policy"))},
    "aws:iam/role:Role": lambda i: {"assumed_by": _policy(i.get("assumeRolePolicy"))},
    "aws:s3/bucketPolicy:BucketPolicy": lambda i: {"policy": _policy(i.get("policy"))},
    "gcp:compute/instance:Instance": _gcp_instance,
}


def settings_of(typ: str, inputs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if typ in _SPECIAL:
        out.update(_SPECIAL[typ](inputs))
    for label, path in _PATHS.get(typ, []):
        out[label] = _get(inputs, path)
    if typ.startswith("aws:ec2/instance") and "userData" in inputs:
        out["user_data"] = SECRET
    return {k: v for k, v in out.items() if v is not None}
