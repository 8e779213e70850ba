"""GCP preflight: credentials, machine and GPU types in the zone, the region's CPU and GPU quotas.

Quota metrics come from the region (`RegionsClient.get`): a machine family with its own metric
(`N2_CPUS`, `A2_CPUS`, ...) counts against it, others against `CPUS`; spot agents count against
`PREEMPTIBLE_CPUS` / `PREEMPTIBLE_NVIDIA_*_GPUS` where the region has them
(https://cloud.google.com/compute/resource-usage). Limits are compared with the most the
deployment can run: the master plus `--max-dynamic-agents` agents of the largest machine type.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from controlplane.common.gcp_errors import is_not_found, message, parse, sdk_errors
from infra.gcp_clients import GcpClients
from infra.options import GcpOptions
from infra.preflight import Report


def cpu_metric(machine_type: str, quotas: dict[str, float], spot: bool) -> str:
    family = machine_type.split("-", 1)[0].upper()
    if spot and "PREEMPTIBLE_CPUS" in quotas:
        return "PREEMPTIBLE_CPUS"
    return f"{family}_CPUS" if f"{family}_CPUS" in quotas else "CPUS"


def gpu_metric(gpu_type: str, quotas: dict[str, float], spot: bool) -> str:
    # nvidia-tesla-t4 -> NVIDIA_T4_GPUS; nvidia-l4 -> NVIDIA_L4_GPUS; nvidia-a100-80gb -> NVIDIA_A100_80GB_GPUS
    name = gpu_type.lower().replace("nvidia-tesla-", "nvidia-").upper().replace("-", "_") + "_GPUS"
    return f"PREEMPTIBLE_{name}" if spot and f"PREEMPTIBLE_{name}" in quotas else name


def check(opts: GcpOptions, clients: GcpClients | None = None) -> Report:
    clients = clients or GcpClients()
    report = Report()
    try:
        clients.check_credentials()
        vcpus = _machine_types(clients, opts, report)
        _accelerator(clients, opts, report)
        region = clients.regions().get(project=opts.project_id, region=opts.region)
    except sdk_errors() as e:
        if (failure := parse(e)) is not None and failure.credentials_refused:
            report.failures = [f"GCP credentials: {message(e).rstrip('.')}."]
        else:
            report.failures.append(f"Could not check project {opts.project_id} in {opts.region}: {message(e)}")
        return report
    quotas = {q.metric: float(q.limit) for q in region.quotas}
    for metric, (need, why) in needs(opts, vcpus, quotas).items():
        if metric not in quotas:
            report.warnings.append(f"Region {opts.region} reports no {metric} quota: it was not checked.")
        elif quotas[metric] < need:
            report.failures.append(
                f"The {metric} quota of region {opts.region} is {quotas[metric]:g}, but {' and '.join(why)} "
                f"need {need:g}: lower --max-dynamic-agents or ask Google to raise it.")
    return report


def needs(opts: GcpOptions, vcpus: dict[str, int], quotas: dict[str, float]) -> dict[str, tuple[float, list[str]]]:
    """Pure: each quota metric -> (what the deployment needs at most, why)."""
    need: dict[str, float] = defaultdict(float)
    why: dict[str, list[str]] = defaultdict(list)
    if opts.master_machine_type in vcpus:
        n = vcpus[opts.master_machine_type]
        metric = cpu_metric(opts.master_machine_type, quotas, spot=False)
        need[metric] += n
        why[metric].append(f"the master ({opts.master_machine_type}, {n} vCPUs)")
    agents = [(vcpus[t], t) for t in opts.gpu_agent_machine_types if t in vcpus]
    if agents and opts.max_dynamic_agents:
        n, t = max(agents)
        metric = cpu_metric(t, quotas, opts.spot)
        need[metric] += n * opts.max_dynamic_agents
        why[metric].append(f"{opts.max_dynamic_agents} agents of {t} ({n} vCPUs each)")
        if opts.gpus_per_agent:
            gpu = gpu_metric(opts.gpu_type, quotas, opts.spot)
            need[gpu] += opts.gpus_per_agent * opts.max_dynamic_agents
            why[gpu].append(f"{opts.max_dynamic_agents} agents with {opts.gpus_per_agent} {opts.gpu_type} each")
    return {m: (need[m], why[m]) for m in need}


def _machine_types(clients: GcpClients, opts: GcpOptions, report: Report) -> dict[str, int]:
    client = clients.machine_types()
    flags = {opts.master_machine_type: "--master-machine-type"}
    flags.update({t: "--gpu-agent-machine-type" for t in opts.gpu_agent_machine_types})
    vcpus: dict[str, int] = {}
    for t, flag in flags.items():
        found = _get_or_none(lambda t=t: client.get(project=opts.project_id, zone=opts.zone, machine_type=t))
        if found is None:
            report.failures.append(f"Machine type {t} ({flag}) is not offered in zone {opts.zone}.")
        else:
            vcpus[t] = int(found.guest_cpus)
    return vcpus


def _accelerator(clients: GcpClients, opts: GcpOptions, report: Report) -> None:
    if not opts.gpus_per_agent:
        return
    client = clients.accelerator_types()
    found = _get_or_none(lambda: client.get(project=opts.project_id, zone=opts.zone, accelerator_type=opts.gpu_type))
    if found is None:
        report.failures.append(f"GPU type {opts.gpu_type} (--gpu-type) is not offered in zone {opts.zone}.")


def _get_or_none(call: Any) -> Any:
    try:
        return call()
    except sdk_errors() as e:
        if is_not_found(e):
            return None
        raise
