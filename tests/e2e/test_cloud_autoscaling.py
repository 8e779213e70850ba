"""Cloud autoscaling end to end: a real det-master autoscales an empty pool on EC2 (moto in server
mode) and on GCE (the real google-cloud-compute client against the tests' Compute endpoint).

The boot simulator runs each launched instance's real boot script as a local det-agent with a
local metadata endpoint, so the whole path is real: demand → launch (tagged) → boot script →
IMDSv2 / GCE metadata identity → registration as the instance id → trials run → idle → terminate →
the agent's processes vanish with the instance. The spot test interrupts an instance through its
metadata and expects a checkpoint, a replacement instance and a resume from that checkpoint. The
mixed-shape tests (no boot simulator) check which instance types a pool of a 1-slot and a 4-slot
type launches for 1-slot trials and for a 4-slot gang, as the cloud lists them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import EXAMPLE, processes_mentioning, slow_first_run_example
from tests.support.boot_simulator import BootSimulator
from tests.support.cluster import MasterProcess, wait_for
from tests.support.moto_server import aws_env, fresh_moto, moto_server_thread
from tests.support.rest_client import SignedInClient

# PostgreSQL: cloud autoscaling is a production cluster's, and its master runs on PostgreSQL.
pytestmark = [pytest.mark.e2e, pytest.mark.one_database("postgres")]

REGION, ZONE = "us-west-2", "us-west-2a"
GCE_PROJECT, GCE_ZONE = "det-test", "us-central1-a"
AWS_ENV = aws_env(REGION)
IDLE = "5s"
HELLO = "hello from the cloud"
SPOT_BATCHES = 1500  # with SPOT_SLOW_S, at least 30 s in its first run: still running when the notice comes
# Every batch of the trial's first run takes at least this long (slow_first_run_example), so an idle
# machine cannot finish the trial between its first checkpoint and the agent's next look at the
# metadata (every 5 s); a loaded one only trains slower, and the cloud waits for the checkpoint. The
# run resumed on the replacement trains the rest at full speed: nothing the test checks depends on it.
SPOT_SLOW_S = 0.02


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    with moto_server_thread() as url:
        yield url


@pytest.fixture
def moto_url(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return fresh_moto(moto_server, monkeypatch, REGION)  # the master inherits the variables


@pytest.fixture
def ec2(moto_url: str):
    import boto3

    return boto3.session.Session().client("ec2", region_name=REGION, endpoint_url=moto_url)


@pytest.fixture
def gce_server():
    from tests.provisioners.gce_server import GceTestServer

    with GceTestServer() as srv:
        yield srv


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[list]:
    """Things to stop at the end, last started first stopped (simulator before master)."""
    started: list = []
    yield started
    for thing in reversed(started):
        try:
            thing.stop()
        except Exception:  # noqa: BLE001 - keep stopping the rest
            pass
    leftovers = processes_mentioning(str(tmp_path))
    for pid in leftovers:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    assert leftovers == [], f"processes outlived the test: {leftovers}"


# -- helpers -------------------------------------------------------------------------------------


class Api(SignedInClient):
    def cluster_id(self) -> str:
        return requests.get(f"{self.url}/info", timeout=10).json()["cluster_id"]

    def agents(self, connected_only: bool = True) -> list[dict]:
        """Agents the master knows (with all=true also departed ones, `connected: false`)."""
        return [a for a in self.get("/api/v1/agents?all=true")["agents"] if a["connected"] or not connected_only]

    def pool(self, name: str = "gpu") -> dict:
        return self.get(f"/api/v1/resource-pools/{name}/autoscaler")

    def experiment(self, exp_id: int) -> dict:
        return self.get(f"/api/v1/experiments/{exp_id}")["experiment"]

    def trials(self, exp_id: int) -> list[dict]:
        return self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"]

    def create_experiment(self, config: dict, context: dict[str, bytes]) -> int:
        files = [{"path": p, "type": 48, "content": base64.b64encode(data).decode(), "mode": 0o644}
                 for p, data in sorted(context.items())]
        return int(self.post("/api/v1/experiments", {"config": config, "modelDefinition": files})["experiment"]["id"])


def _state(exp: dict) -> str:
    return exp["state"].removeprefix("STATE_")


def wait_experiment(api: Api, exp_id: int, timeout_s: float, why) -> dict:
    def done():
        exp = api.experiment(exp_id)
        return exp if _state(exp) in ("COMPLETED", "CANCELED", "ERROR") else None

    try:
        exp = wait_for(done, timeout_s, f"experiment {exp_id} to finish", interval_s=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    assert _state(exp) == "COMPLETED", f"experiment {exp_id} ended {exp['state']}\n{why()}"
    return exp


def hello_config() -> dict:
    return {"name": "cloud-hello", "entrypoint": f"python3 -c \"print('{HELLO}')\"",
            "resources": {"resource_pool": "gpu", "slots_per_trial": 1},
            "searcher": {"name": "random", "metric": "x", "max_trials": 2, "max_length": 1},
            "hyperparameters": {"n": {"type": "int", "minval": 1, "maxval": 100}}, "max_restarts": 0}


def start_master(tmp_path: Path, db_url: str, provider: dict, stack: list, **extra) -> tuple[MasterProcess, Api]:
    pool = {"pool_name": "gpu", "provider": provider}
    master = MasterProcess(tmp_path / "master", db_url, extra={
        "autoscaler_tick": "1s", "resource_pools": [pool], "agent_reconnect_wait": "3s", **extra})
    stack.append(master)
    master.start()
    return master, Api(master.url)


def diagnose(master: MasterProcess, sim: BootSimulator, api: Api) -> str:
    try:
        pool = json.dumps(api.pool(), indent=1)[:3000]
    except Exception as e:  # noqa: BLE001
        pool = f"(autoscaler describe failed: {e})"
    return f"master log:\n{master.log_tail(40)}\n\nsimulator:\n{sim.describe()}\n\npool:\n{pool}"


def ec2_ids(ec2, cluster_id: str, states: tuple[str, ...] | None = None) -> list[str]:
    resp = ec2.describe_instances(Filters=[{"Name": "tag:det-cluster-id", "Values": [cluster_id]},
                                           {"Name": "tag:det-pool", "Values": ["gpu"]}])
    return sorted(i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]
                  if states is None or i["State"]["Name"] in states)


def gce_names(srv, cluster_id: str) -> list[str]:
    with srv.state.lock:
        return sorted(i["name"] for i in srv.state.instances.values()
                      if i.get("labels", {}).get("det-cluster-id") == cluster_id)


def check_lifecycle(api: Api, master: MasterProcess, sim: BootSimulator, cloud_ids, tmp_path: Path) -> None:
    """Submit two one-slot trials to the empty pool; follow them through launch, boot,
    registration, the run, idle scale-down and cleanup."""
    why = lambda: diagnose(master, sim, api)  # noqa: E731
    assert api.agents() == [] and cloud_ids() == []
    exp_id = api.create_experiment(hello_config(), {"README": b"cloud autoscaling e2e\n"})

    launched = wait_for(lambda: cloud_ids() or None, 60, "the autoscaler to launch instances")
    assert 1 <= len(launched) <= 2, launched

    def registered():
        ids = {a["id"] for a in api.agents()}
        return ids if ids and ids <= set(sim.live()) | set(sim.gone()) else None

    try:
        agent_ids = wait_for(registered, 90, "agents to register as their instances")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    assert agent_ids <= set(sim.instances), (agent_ids, list(sim.instances))

    wait_experiment(api, exp_id, 240, why)
    trials = api.trials(exp_id)
    assert len(trials) == 2 and all(_state(t) == "COMPLETED" for t in trials), trials
    for t in trials:
        assert HELLO in api.trial_logs(t["id"]), f"trial {t['id']} logs lack the line\n{why()}"

    every = set(sim.instances)  # everything the simulator ever booted
    assert every and every <= set(launched) | set(api_instance_ids(api)), (every, launched)

    def scaled_down():
        d = api.pool()
        done = d["instances"] and all(i["state"] == "terminated" for i in d["instances"])
        return d if done and not cloud_ids() and not sim.live() and not api.agents() else None

    try:
        pool = wait_for(scaled_down, 90, "idle instances to be terminated and their agents to go", interval_s=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    ids = {i["id"] for i in pool["instances"]}
    assert ids == every, (ids, every)
    assert {a["id"] for a in api.agents(connected_only=False)} == every  # each agent was its instance
    for inst in pool["instances"]:
        assert inst["agentId"] == inst["id"], inst  # the agent id is the instance's own
        assert inst["reason"] and "idle" in inst["reason"], inst
        assert inst["terminatedAt"], inst
    assert pool["provider"] in ("aws", "gcp") and pool["autoscaling"] is True
    # The agents' processes went with their instances.
    for iid in every:
        assert processes_mentioning(str(tmp_path / "sim" / iid)) == [], iid
    assert sim.errors == []


def api_instance_ids(api: Api) -> list[str]:
    return [i["id"] for i in api.pool()["instances"]]


# -- tests ----------------------------------------------------------------------------------------


def test_ec2_instances_boot_register_run_and_go_when_idle(tmp_path, db_url, moto_url, ec2, stack):
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    provider = {"type": "aws", "region": REGION, "endpoint_url": moto_url, "image_id": image_id,
                "instance_type": "t3.micro", "zones": [ZONE], "max_instances": 2, "slots_per_instance": 1,
                "max_idle_agent_period": IDLE, "max_agent_starting_period": "2m"}
    master, api = start_master(tmp_path, db_url, provider, stack)
    cluster_id = api.cluster_id()
    sim = BootSimulator.ec2(moto_url, tmp_path / "sim", region=REGION, cluster_id=cluster_id,
                            agent_args=["--slots", "1", "--slot-type", "cpu"])
    stack.append(sim.start())

    check_lifecycle(api, master, sim, lambda: ec2_ids(ec2, cluster_id, ("pending", "running")), tmp_path)

    # Launched hardened and tagged, and every one of them terminated in the cloud.
    all_ids = ec2_ids(ec2, cluster_id)
    assert set(all_ids) == set(sim.instances)
    resp = ec2.describe_instances(InstanceIds=all_ids)
    for inst in (i for r in resp["Reservations"] for i in r["Instances"]):
        assert inst["State"]["Name"] == "terminated", inst["State"]
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        assert tags["det-pool"] == "gpu" and tags["det-launch-request"], tags
        assert inst["Placement"]["AvailabilityZone"] == ZONE
    # The boot script reached the instance metadata the IMDSv2 way (token first).
    for inst in sim.instances.values():
        paths = [(m, p) for m, p, _ in inst.metadata.requests]
        assert ("PUT", "/latest/api/token") in paths and ("GET", "/latest/meta-data/instance-id") in paths, paths


def test_gce_instances_boot_register_run_and_go_when_idle(tmp_path, db_url, gce_server, stack):
    provider = {"type": "gcp", "project": GCE_PROJECT, "zones": [GCE_ZONE], "machine_type": "n1-standard-4",
                "image": "projects/debian-cloud/global/images/family/debian-12", "endpoint": gce_server.url,
                "max_instances": 2, "slots_per_instance": 1, "max_idle_agent_period": IDLE,
                "max_agent_starting_period": "2m"}
    master, api = start_master(tmp_path, db_url, provider, stack)
    cluster_id = api.cluster_id()
    sim = BootSimulator.gce(gce_server.state, tmp_path / "sim", cluster_id=cluster_id,
                            agent_args=["--slots", "1", "--slot-type", "cpu"])
    stack.append(sim.start())

    check_lifecycle(api, master, sim, lambda: gce_names(gce_server, cluster_id), tmp_path)

    deletes = [p for m, p in gce_server.state.requests if m == "DELETE"]
    assert {p.rsplit("/", 1)[-1] for p in deletes} == set(sim.instances), deletes
    for inst in sim.instances.values():
        paths = [p for _, p, _ in inst.metadata.requests]
        assert "/computeMetadata/v1/instance/name" in paths, paths


@pytest.mark.timeout(600)
def test_ec2_spot_interruption_checkpoints_and_resumes_on_a_new_instance(tmp_path, db_url, moto_url, ec2, stack):
    import yaml

    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    provider = {"type": "aws", "region": REGION, "endpoint_url": moto_url, "image_id": image_id,
                "instance_type": "t3.micro", "zones": [ZONE], "spot": True, "max_instances": 2,
                "slots_per_instance": 1, "max_idle_agent_period": IDLE, "max_agent_starting_period": "2m"}
    master, api = start_master(tmp_path, db_url, provider, stack, preemption_timeout="60s")
    cluster_id = api.cluster_id()
    sim = BootSimulator.ec2(moto_url, tmp_path / "sim", region=REGION, cluster_id=cluster_id,
                            agent_args=["--slots", "1", "--slot-type", "cpu"])
    stack.append(sim.start())
    why = lambda: diagnose(master, sim, api)  # noqa: E731

    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["resources"] = {"resource_pool": "gpu", "slots_per_trial": 1}
    config["searcher"]["max_length"] = {"batches": SPOT_BATCHES}
    example = slow_first_run_example(tmp_path, SPOT_SLOW_S)
    context = {p.name: p.read_bytes() for p in example.iterdir() if p.is_file()}
    exp_id = api.create_experiment(config, context)

    def running_with_a_checkpoint():
        trials = api.trials(exp_id)
        live = sim.live()
        if trials and len(live) == 1 and _state(trials[0]) == "RUNNING" and trials[0].get("latestCheckpointUuid"):
            return trials[0], live[0]
        return None

    try:
        trial, victim = wait_for(running_with_a_checkpoint, 120, "the trial to run (and checkpoint) on a spot "
                                 "instance", interval_s=0.3)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    assert [a["id"] for a in api.agents()] == [victim]
    raw = ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]
    assert raw.get("InstanceLifecycle") == "spot", raw
    # The notice appears in the instance metadata (EC2 gives two minutes). The cloud takes the
    # machine once the trial has checkpointed and stopped: how fast a loaded machine trains to its
    # next checkpoint is not what this test is about, and a reclaim before it is the lost-agent path.
    sim.interrupt(victim)

    try:
        wait_for(lambda: "preempted at batch" in api.trial_logs(trial["id"]), 120,
                 "the interrupted trial to checkpoint and stop", interval_s=0.5)
        sim.interrupt(victim, terminate_after_s=0)
        wait_for(lambda: victim in sim.gone(), 60, "the interrupted instance to go")
        replacement = wait_for(lambda: [i for i in sim.live() if i != victim] or None, 90,
                               "a replacement instance to boot")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    wait_experiment(api, exp_id, 420, why)
    t = api.get(f"/api/v1/trials/{trial['id']}")["trial"]
    assert _state(t) == "COMPLETED" and t["runId"] >= 2, t
    logs = api.trial_logs(trial["id"])
    assert "resumed from checkpoint" in logs, logs[-3000:]
    by_id = {i["id"]: i for i in api.pool()["instances"]}
    assert victim in by_id and replacement[0] in by_id, by_id
    assert by_id[victim]["spot"] is True and by_id[victim]["agentId"] == victim, by_id[victim]
    # (Its record's state is checked by test_an_instance_that_vanishes_from_the_cloud_is_replaced.)
    try:
        wait_for(lambda: not ec2_ids(ec2, cluster_id, ("pending", "running", "stopping", "stopped"))
                 and not sim.live(), 90, "the replacement to go when idle")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None


def test_an_instance_that_vanishes_from_the_cloud_is_replaced(tmp_path, db_url, moto_url, ec2, stack):
    """Terminated behind the master's back: its agent goes with it, `min_instances` brings a new
    one, and the old instance's record says it is gone."""
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    provider = {"type": "aws", "region": REGION, "endpoint_url": moto_url, "image_id": image_id,
                "instance_type": "t3.micro", "zones": [ZONE], "min_instances": 1, "max_instances": 2,
                "slots_per_instance": 1, "max_idle_agent_period": IDLE, "max_agent_starting_period": "2m"}
    master, api = start_master(tmp_path, db_url, provider, stack)
    cluster_id = api.cluster_id()
    sim = BootSimulator.ec2(moto_url, tmp_path / "sim", region=REGION, cluster_id=cluster_id,
                            agent_args=["--slots", "1", "--slot-type", "cpu"])
    stack.append(sim.start())
    why = lambda: diagnose(master, sim, api)  # noqa: E731
    try:
        # Wait for a tick to have seen it running with its agent. (An instance taken away before any
        # list saw it keeps its launch "in flight" in reconciler.py until max_agent_starting_period,
        # which delays the replacement by that much: a known gap, not what this test is about.)
        first = wait_for(lambda: [i["id"] for i in api.pool()["instances"]
                                  if i["state"] == "running" and i["agentId"] and i["connected"]] or None,
                         60, "min_instances to bring an agent", interval_s=0.5)
        assert first == sim.live() and len(first) == 1, (first, sim.live())
        ec2.terminate_instances(InstanceIds=first)  # behind the master's back
        wait_for(lambda: first[0] in sim.gone(), 30, "the instance's agent to go with it")
        second = wait_for(lambda: [a["id"] for a in api.agents() if a["id"] != first[0]] or None, 60,
                          "a replacement instance to register")
        assert ec2_ids(ec2, cluster_id, ("pending", "running")) == second, "min_instances holds with one instance"
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None

    def record_terminated():
        rec = {i["id"]: i for i in api.pool()["instances"]}[first[0]]
        return rec if rec["state"] == "terminated" else None

    rec = wait_for(record_terminated, 15, "the vanished instance's record to say it is gone", interval_s=0.5)
    assert rec["terminatedAt"] and "gone from the cloud" in rec["reason"], rec


# -- mixed shapes ---------------------------------------------------------------------------------
# A pool of a 1-slot and a 4-slot type, priced so that the 1-slot type is cheaper per slot ($1/h a
# slot against $1.25/h): the planner launches 1-slot instances for 1-slot trials and the 4-slot type
# for a 4-slot gang. No instance boots an agent here (no boot simulator): what the test checks is
# what the master asks the cloud for, and the cloud's own listing of what it launched.
SHAPE_PRICES = {"small": 1.0, "big": 5.0}


def shape_config(name: str, slots: int, trials: int) -> dict:
    return {"name": name, "entrypoint": f"python3 -c \"print('{HELLO}')\"",
            "resources": {"resource_pool": "gpu", "slots_per_trial": slots},
            "searcher": {"name": "random", "metric": "x", "max_trials": trials, "max_concurrent_trials": trials,
                         "max_length": 1},
            "hyperparameters": {"n": {"type": "int", "minval": 1, "maxval": 100}}, "max_restarts": 0}


def check_shapes(api: Api, master: MasterProcess, live_types, small: str, big: str) -> None:
    """Three 1-slot trials bring three `small` instances; then a 4-slot gang brings one `big`.
    ``live_types()``: the types of the cluster's live instances, as the cloud lists them."""
    def why() -> str:
        try:
            pool = json.dumps(api.pool(), indent=1)[:3000]
        except Exception as e:  # noqa: BLE001 - a diagnostic
            pool = f"(autoscaler describe failed: {e})"
        return f"cloud lists: {live_types()}\nmaster log:\n{master.log_tail(40)}\n\npool:\n{pool}"

    def settled(expected: list[str], gangs: int):
        """The cloud lists exactly ``expected``, the pool's records are those instances, and a tick
        that saw them all booting decided to launch nothing more for the ``gangs`` pending gangs."""
        quiet = (f"not scaling up: {gangs} pending gangs fit on capacity already there or coming "
                 f"(0 idle agents, {len(expected)} booting instances, 0 launches not listed yet)")

        def check():
            if sorted(live_types()) != expected:
                return None
            d = api.pool()
            records = sorted(i["instanceType"] for i in d["instances"] if i["state"] != "terminated")
            return d if records == expected and d["plan"] == [quiet] and sorted(live_types()) == expected else None
        return check

    assert live_types() == []
    api.create_experiment(shape_config("three-small", 1, 3), {"README": b"mixed shapes\n"})
    try:
        wait_for(lambda: len(live_types()) >= 3 or None, 60, "instances for three 1-slot trials", interval_s=0.3)
        first = wait_for(settled([small] * 3, 3), 30, f"exactly three {small} instances", interval_s=0.3)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    assert sorted(live_types()) == [small] * 3, why()
    shapes = {s["instanceType"]: s for s in first["shapes"]}
    assert shapes[small]["slots"] == 1 and shapes[small]["usdPerHour"] == SHAPE_PRICES["small"], shapes
    assert shapes[big]["slots"] == 4 and shapes[big]["usdPerHour"] == SHAPE_PRICES["big"], shapes
    assert shapes[small]["count"] == 3 and shapes[big]["count"] == 0, shapes
    assert {i["reason"].split(" in zone")[0] for i in first["instances"]} == {f"launch 3 × {small} (on-demand)"}

    api.create_experiment(shape_config("one-gang", 4, 1), {"README": b"mixed shapes\n"})
    try:
        wait_for(lambda: len(live_types()) >= 4 or None, 60, "an instance for the 4-slot gang", interval_s=0.3)
        second = wait_for(settled(sorted([small] * 3 + [big]), 4), 30, f"three {small} and one {big}", interval_s=0.3)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    shapes = {s["instanceType"]: s for s in second["shapes"]}
    assert shapes[small]["count"] == 3 and shapes[big]["count"] == 1, shapes
    reasons = {i["instanceType"]: i["reason"] for i in second["instances"]}
    assert reasons[big].startswith(f"launch 1 × {big} (on-demand)"), reasons
    assert second["burnUsdPerHour"] == 3 * SHAPE_PRICES["small"] + SHAPE_PRICES["big"], second["burn"]


@pytest.mark.both_databases  # the instance records and their shapes' prices are stored and read back in SQL
def test_ec2_mixed_pool_launches_the_cheapest_shape_per_used_slot(tmp_path, db_url, moto_url, ec2, stack):
    small, big = "g4dn.xlarge", "g4dn.12xlarge"  # 1 and 4 GPUs in the catalogue
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    provider = {"type": "aws", "region": REGION, "endpoint_url": moto_url, "image_id": image_id,
                "instance_types": [small, big], "prices": {small: SHAPE_PRICES["small"], big: SHAPE_PRICES["big"]},
                "zones": [ZONE], "max_instances": 8, "max_idle_agent_period": IDLE,
                "max_agent_starting_period": "5m"}
    master, api = start_master(tmp_path, db_url, provider, stack)
    cluster_id = api.cluster_id()

    def live_types() -> list[str]:
        resp = ec2.describe_instances(Filters=[{"Name": "tag:det-cluster-id", "Values": [cluster_id]},
                                               {"Name": "tag:det-pool", "Values": ["gpu"]},
                                               {"Name": "instance-state-name", "Values": ["pending", "running"]}])
        return [i["InstanceType"] for r in resp["Reservations"] for i in r["Instances"]]

    check_shapes(api, master, live_types, small, big)


@pytest.mark.both_databases  # the instance records and their shapes' prices are stored and read back in SQL
def test_gce_mixed_pool_launches_the_cheapest_shape_per_used_slot(tmp_path, db_url, gce_server, stack):
    small, big = "g2-standard-4", "g2-standard-48"  # 1 and 4 L4s in the catalogue
    provider = {"type": "gcp", "project": GCE_PROJECT, "zones": [GCE_ZONE], "machine_types": [small, big],
                "prices": {small: SHAPE_PRICES["small"], big: SHAPE_PRICES["big"]},
                "image": "projects/debian-cloud/global/images/family/debian-12", "endpoint": gce_server.url,
                "max_instances": 8, "max_idle_agent_period": IDLE, "max_agent_starting_period": "5m"}
    master, api = start_master(tmp_path, db_url, provider, stack)
    cluster_id = api.cluster_id()

    def live_types() -> list[str]:
        with gce_server.state.lock:
            return [i["machineType"].rsplit("/", 1)[-1] for i in gce_server.state.instances.values()
                    if i.get("labels", {}).get("det-cluster-id") == cluster_id and i.get("status") == "RUNNING"]

    check_shapes(api, master, live_types, small, big)
