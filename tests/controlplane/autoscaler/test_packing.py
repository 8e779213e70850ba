"""First-fit decreasing of unplaceable gangs onto spare and new instances."""

from __future__ import annotations

import pytest

from controlplane.autoscaler.packing import Option, pack


def one(slots: int) -> list[Option]:
    return [Option("t", slots)]


@pytest.mark.parametrize(
    ("gangs", "bins", "slots", "new", "used", "unfittable"),
    [
        ([], [], 4, 0, [], {}),
        ([1, 1, 1, 1], [], 4, 1, [], {}),                       # four 1-slot gangs share one instance
        ([3, 3, 1, 1], [], 4, 2, [], {}),                       # FFD: 3+1, 3+1
        ([8], [], 4, 2, [], {}),                                # multiple of the shape: two whole instances
        ([6], [], 4, 0, [], {6: 1}),                            # 6 on 4-slot instances: never
        ([6, 6, 2], [], 4, 1, [], {6: 2}),
        ([0, 0, 2], [], 4, 1, [], {}),                          # zero-slot gangs need no instance
        ([2, 2], [4], 4, 0, [True], {}),                        # an idle/booting bin absorbs them
        ([4], [2, 4], 4, 0, [False, True], {}),                 # first bin with room
        ([1], [4, 4], 4, 0, [True, False], {}),                 # first fit: lowest index
        ([8], [4], 4, 1, [True], {}),                           # a gang across one spare + one new
        ([8], [4, 4, 4], 4, 0, [True, True, False], {}),
        ([12], [16], 4, 0, [True], {}),                         # an odd big static agent can hold it
    ],
)
def test_pack_table(gangs, bins, slots, new, used, unfittable):
    p = pack(gangs, bins, one(slots))
    assert p.new_instances == new
    assert p.used == used
    assert p.unfittable == unfittable


def test_large_gang_takes_only_whole_untouched_bins():
    # the 16-slot bin holding a 12-gang is left with 4: not a whole 4-slot instance
    p = pack([12, 8], [16, 4], one(4))
    assert p.used == [True, True]
    assert p.new_instances == 1  # 8 = the 4-slot bin + one new instance


def test_many_gangs_are_fast_enough_and_exact():
    p = pack([1] * 4000 + [2] * 2000 + [4] * 1000, [4] * 500, one(4))
    assert p.new_instances == (4000 + 4000 + 4000) // 4 - 500


G5 = [Option("g5.xlarge", 1, 1.006), Option("g5.12xlarge", 4, 5.672), Option("g5.48xlarge", 8, 16.288)]


@pytest.mark.parametrize(
    ("gangs", "new"),
    [
        ([1, 1, 1], {"g5.xlarge": 3}),                    # 1-slot instances are cheapest per GPU
        ([4], {"g5.12xlarge": 1}),                        # the smallest shape that holds it
        ([2, 1, 1], {"g5.12xlarge": 1}),                  # the 2-gang opens a 4-slot one; the 1s fill it
        ([8, 1], {"g5.48xlarge": 1, "g5.xlarge": 1}),
        ([16], {"g5.48xlarge": 2}),                       # spans as few whole instances as it can
        ([12], {"g5.12xlarge": 3}),
    ],
)
def test_mixed_shapes_launch_the_least_cost_per_used_slot(gangs, new):
    assert pack(gangs, [], G5).new_by_type == new


def test_mixed_shapes_fill_the_fullest_bin_first():
    # best fit: the 1-slot gang takes the 4-slot bin with 1 free, keeping the 8-slot one whole
    p = pack([1], [8, 1], G5, best_fit=True)
    assert p.used == [False, True]
    assert p.left == [8, 0]


def test_a_gang_no_shape_holds_is_unfittable():
    assert pack([10], [], G5[1:]).unfittable == {10: 1}  # more than 8, no multiple of 4 or 8
