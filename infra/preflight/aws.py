"""AWS preflight: credentials (STS), instance types offered in the region, vCPU quotas.

vCPU quotas are per class of instance family and per market (on-demand, spot), read from
Service Quotas (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html).
The need per class is the master (on-demand) plus `--max-dynamic-agents` times the largest agent
type of that class, since the pool may launch any of them. Where the quota cannot be read (the
API is not reachable, not allowed, or does not know the quota) that is a warning.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from controlplane.common.aws_errors import describe, sdk_errors
from infra.options import AwsOptions
from infra.preflight import Report


@dataclass(frozen=True)
class QuotaClass:
    name: str
    on_demand_code: str
    spot_code: str


_STANDARD = QuotaClass("Standard (A, C, D, H, I, M, R, T, Z)", "L-1216C47A", "L-34B43A08")
QUOTA_CLASSES: dict[str, QuotaClass] = {
    **{f: _STANDARD for f in ("a", "c", "d", "h", "i", "m", "r", "t", "z")},
    "g": QuotaClass("G and VT", "L-DB2E81BA", "L-3819A6DF"),
    "vt": QuotaClass("G and VT", "L-DB2E81BA", "L-3819A6DF"),
    "p": QuotaClass("P", "L-417A185B", "L-7212CCBC"),
    "f": QuotaClass("F", "L-74FC7D96", "L-88CF9481"),
    "inf": QuotaClass("Inf", "L-1945791B", "L-B5D1601B"),
    "x": QuotaClass("X", "L-7295265B", "L-E3A00192"),
    "dl": QuotaClass("DL", "L-6E869C2A", "L-85EED4F7"),
    "trn": QuotaClass("Trn", "L-2C3B7624", "L-6B0D517C"),
}


def quota_class(instance_type: str) -> QuotaClass | None:
    family = re.match(r"[a-z]+", instance_type.split(".", 1)[0])
    return QUOTA_CLASSES.get(family.group(0)) if family else None


@dataclass(frozen=True)
class Need:
    """vCPUs one quota must hold, and the sentence that says why."""

    quota: QuotaClass
    spot: bool
    vcpus: int
    why: list[str]


def needs(opts: AwsOptions, vcpus: dict[str, int]) -> tuple[list[Need], list[str]]:
    """Pure: the vCPUs each (quota class, market) must hold, and types with no known quota."""
    total: dict[tuple[str, bool], int] = defaultdict(int)
    why: dict[tuple[str, bool], list[str]] = defaultdict(list)
    classes: dict[str, QuotaClass] = {}
    unknown: list[str] = []
    master = quota_class(opts.master_instance_type)
    if master is None:
        unknown.append(opts.master_instance_type)
    elif opts.master_instance_type in vcpus:
        key = (master.on_demand_code, False)
        total[key] += vcpus[opts.master_instance_type]
        why[key].append(f"the master ({opts.master_instance_type}, {vcpus[opts.master_instance_type]} vCPUs)")
        classes[master.on_demand_code] = master
    largest: dict[str, tuple[int, str]] = {}
    for t in opts.gpu_agent_instance_types:
        cls = quota_class(t)
        if cls is None:
            unknown.append(t)
        elif t in vcpus:
            classes[cls.on_demand_code] = cls
            largest[cls.on_demand_code] = max(largest.get(cls.on_demand_code, (0, "")), (vcpus[t], t))
    for code, (n, t) in largest.items():
        key = (code, opts.spot)
        if opts.max_dynamic_agents:
            total[key] += n * opts.max_dynamic_agents
            why[key].append(f"{opts.max_dynamic_agents} agents of {t} ({n} vCPUs each)")
    return [Need(classes[code], spot, n, why[(code, spot)]) for (code, spot), n in total.items() if n], unknown


def _clients(opts: AwsOptions, session: Any | None) -> tuple[Any, Any, Any]:
    import boto3

    session = session or boto3.session.Session()
    return (session.client("sts", region_name=opts.region), session.client("ec2", region_name=opts.region),
            session.client("service-quotas", region_name=opts.region))


def check(opts: AwsOptions, session: Any | None = None) -> Report:
    """Everything `up` would trip over in this account and region; `session` is a boto3 Session."""
    report = Report()
    errors = sdk_errors()
    sts, ec2, quotas = _clients(opts, session)
    try:
        sts.get_caller_identity()
    except errors as e:
        report.failures.append(f"AWS credentials: {describe(e).rstrip('.')}.")
        return report  # every other call would fail the same way
    try:
        offered = _offered(ec2, opts)
        vcpus = _vcpus(ec2, sorted(offered))
    except errors as e:
        report.failures.append(f"Could not list the instance types of {opts.region}: {describe(e)}")
        return report
    flags = {opts.master_instance_type: "--master-instance-type"}
    flags.update({t: "--gpu-agent-instance-type" for t in opts.gpu_agent_instance_types})
    for t, flag in flags.items():
        if t not in offered:
            report.failures.append(f"Instance type {t} ({flag}) is not offered in region {opts.region}.")
    wanted, unknown = needs(opts, vcpus)
    for t in unknown:
        report.warnings.append(f"No known vCPU quota for instance type {t}: its quota was not checked.")
    for need in wanted:
        _check_quota(quotas, opts, need, report)
    return report


def _offered(ec2: Any, opts: AwsOptions) -> set[str]:
    types = sorted({opts.master_instance_type, *opts.gpu_agent_instance_types})
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="region", Filters=[{"Name": "instance-type", "Values": types}])
    return {o["InstanceType"] for page in pages for o in page.get("InstanceTypeOfferings", [])}


def _vcpus(ec2: Any, types: list[str]) -> dict[str, int]:
    if not types:
        return {}
    found = ec2.describe_instance_types(InstanceTypes=types).get("InstanceTypes", [])
    return {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in found}


def _check_quota(quotas: Any, opts: AwsOptions, need: Need, report: Report) -> None:
    market = "spot" if need.spot else "on-demand"
    code = need.quota.spot_code if need.spot else need.quota.on_demand_code
    try:
        limit = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except sdk_errors() as e:
        report.warnings.append(f"Could not read the {market} vCPU quota for {need.quota.name} instances "
                               f"(Service Quotas {code}): {describe(e)}; it was not checked.")
        return
    if limit < need.vcpus:
        report.failures.append(
            f"The {market} vCPU quota for {need.quota.name} instances in {opts.region} is {limit:g}, "
            f"but {' and '.join(need.why)} need {need.vcpus}: lower --max-dynamic-agents or ask AWS "
            f"to raise quota {code}.")
