"""Task environments: a request runs only on agents offering its environment.image, under both
schedulers and for zero-slot work; agents offering several environments are one pool of slots."""

from __future__ import annotations

import random

import pytest

from controlplane.scheduler.environment import DEFAULT_IMAGE, Image, image_of
from controlplane.scheduler.model import PoolPolicy, Request
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req, running

KINDS = ("priority", "fair_share")


def where(p) -> dict[str, list[str]]:
    return {x.allocation_id: [a for a, _ in x.resources] for x in p.placements}


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_goes_only_to_agents_offering_its_environment(kind):
    agents = [agent("a", 2), agent("b", 2, envs=("torch",))]
    p = plan(pools(scheduler=kind), [req("t", 2, env="torch"), req("d", 2, submitted=1)], [], agents, NOW)
    assert where(p) == {"t": ["b"], "d": ["a"]}


@pytest.mark.parametrize("kind", KINDS)
def test_an_environment_no_agent_offers_waits_without_blocking(kind):
    agents = [agent("a", 2, envs=("torch",))]
    p = plan(pools(scheduler=kind), [req("gone", 1, env="tf", priority=1), req("next", 1, priority=50)], [],
             agents, NOW)
    assert where(p) == {"next": ["a"]} and p.preemptions == []


@pytest.mark.parametrize("kind", KINDS)
def test_views_share_the_agents_slots(kind):
    """Both environments live on one agent: it is booked once, not once per environment."""
    agents = [agent("a", 2, envs=("x", "y")), agent("b", 2)]
    pending = [req("x1", 2, env="x"), req("y1", 2, env="y", submitted=1)]
    p = plan(pools(scheduler=kind), pending, [], agents, NOW)
    assert list(where(p).values()) == [["a"]]


def test_an_image_map_picks_by_the_agents_slot_type():
    image = image_of({"cpu": "cpu-env", "cuda": "gpu-env"})
    agents = [agent("cpu-a", 1, envs=("gpu-env",)), agent("cpu-b", 1, envs=("cpu-env",)),
              agent("gpu-a", 1, envs=("cpu-env",), slot_type="cuda"), agent("gpu-b", 1, envs=("gpu-env",),
                                                                           slot_type="cuda")]
    p = plan(pools(), [req("r1", 1, env=image), req("r2", 1, env=image, submitted=1),
                       req("r3", 1, env=image, submitted=2)], [], agents, NOW)
    assert sorted(a for w in where(p).values() for a in w) == ["cpu-b", "gpu-b"]


def test_a_blocked_head_holds_only_the_agents_of_its_environment():
    """The head (torch, 2 slots) waits for b; default work behind it still backfills a."""
    agents = [agent("a", 2), agent("b", 2, used=(0,), envs=("torch",))]
    run = [running("r", {"b": (0,)}, priority=42)]
    pending = [req("head", 2, env="torch", priority=10), req("back", 2, priority=60, submitted=1)]
    p = plan(pools(preemption=False), pending, run, agents, NOW)
    assert where(p) == {"back": ["a"]}


def test_preemption_looks_for_victims_only_where_the_environment_is():
    agents = [agent("a", 1, used=(0,)), agent("b", 1, used=(0,), envs=("torch",))]
    run = [running("on-a", {"a": (0,)}, priority=90, started=2), running("on-b", {"b": (0,)}, priority=80)]
    p = plan(pools(), [req("hi", 1, env="torch", priority=1)], run, agents, NOW)
    assert [x.allocation_id for x in p.preemptions] == ["on-b"]  # not the lower-priority work on a


def test_fair_share_fits_gangs_in_their_environment():
    agents = [agent("a", 2), agent("b", 2, envs=("torch",))]
    pending = [req("A1", 1, job="A", env="torch"), req("A2", 1, job="A", env="torch", submitted=1),
               req("B1", 1, job="B"), req("B2", 1, job="B", submitted=1)]
    p = plan(pools(scheduler="fair_share"), pending, [], agents, NOW)
    placed = where(p)
    assert placed["A1"] == placed["A2"] == ["b"] and len(placed) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_zero_slot_work_goes_where_its_cpu_environment_is(kind):
    agents = [agent("a", 1), agent("b", 1, zero=5, envs=("torch",)), agent("c", 1, envs=("torch",), slot_type="cuda")]
    pending = [req("z1", 0, env=Image(cpu="torch", cuda="other")), req("z2", 0, submitted=1)]
    p = plan(pools(scheduler=kind), pending, [], agents, NOW)
    # a zero-slot task is a CPU task: the image's cpu name, on any agent offering it (fewest tasks first)
    assert where(p) == {"z1": ["c"], "z2": ["a"]}


def test_zero_slot_work_of_an_environment_at_its_cap_waits_and_others_go_on():
    policy = {"default": PoolPolicy("default", max_zero_slot_per_agent=1)}
    agents = [agent("a", 1), agent("b", 1, envs=("torch",))]
    pending = [req("t1", 0, env="torch"), req("t2", 0, env="torch", submitted=1), req("d1", 0, submitted=2)]
    p = plan(policy, pending, [], agents, NOW)
    assert where(p) == {"t1": ["b"], "d1": ["a"]}


def test_random_plans_place_work_only_where_its_environment_is():
    names = ("default", "torch", "tf")
    for seed in range(200):
        rng = random.Random(seed)
        agents = [agent(f"a{i:02d}", rng.choice([1, 2, 4]), envs=tuple(rng.sample(names[1:], rng.randint(0, 2))),
                        slot_type=rng.choice(["cpu", "cuda"]), zero=rng.randint(0, 2))
                  for i in range(rng.randint(1, 8))]
        pending: list[Request] = []
        for i in range(rng.randint(0, 20)):
            image = (Image(rng.choice(names), rng.choice(names), "default") if rng.random() < 0.3
                     else Image(*(rng.choice(names),) * 3))
            pending.append(req(f"p{i}", rng.choice([0, 1, 2, 4, 8]), job=f"j{rng.randint(0, 4)}", env=image,
                               priority=rng.randint(1, 99), submitted=float(i)))
        by_id = {a.agent_id: a for a in agents}
        reqs = {r.allocation_id: r for r in pending}
        for kind in KINDS:
            p = plan(pools(scheduler=kind, max_zero_slot_per_agent=3), pending, [], agents, NOW)
            booked: set[tuple[str, int]] = set()
            for x in p.placements:
                r = reqs[x.allocation_id]
                for agent_id, slots in x.resources:
                    a = by_id[agent_id]
                    # a zero-slot task is a CPU task wherever it runs
                    assert a.offers(r.image) if r.slots_needed else r.image.cpu in a.environments, (seed, kind, x)
                    for s in slots:
                        assert (agent_id, s) not in booked
                        booked.add((agent_id, s))


def test_image_of_reads_determineds_forms():
    assert image_of(None) == DEFAULT_IMAGE
    assert image_of("torch") == Image("torch", "torch", "torch")
    assert image_of({"cpu": "c", "gpu": "g"}) == Image(cpu="c", cuda="g")
    assert image_of({"cuda": "g", "rocm": None}) == Image(cuda="g")
    assert image_of("determinedai/pytorch-ngc-dev:0.38.1").for_slot_type("cpu") == "determinedai/pytorch-ngc-dev:0.38.1"
    for bad, words in ((5, "must be a name or a map"), ("", "empty"), ({"tpu": "x"}, "unknown device type 'tpu'"),
                       ({"cpu": 3}, "cpu: must name"), ({"gpu": "a", "cuda": "b"}, "but")):
        with pytest.raises(ValueError, match=words):
            image_of(bad)
