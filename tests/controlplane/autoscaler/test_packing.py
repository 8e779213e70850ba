"""First-fit decreasing of unplaceable gangs onto spare and new instances."""

from __future__ import annotations

import pytest

from controlplane.autoscaler.packing import pack


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
    p = pack(gangs, bins, slots)
    assert p.new_instances == new
    assert p.used == used
    assert p.unfittable == unfittable


def test_large_gang_takes_only_whole_untouched_bins():
    # the 16-slot bin holding a 12-gang is left with 4: not a whole 4-slot instance
    p = pack([12, 8], [16, 4], 4)
    assert p.used == [True, True]
    assert p.new_instances == 1  # 8 = the 4-slot bin + one new instance


def test_many_gangs_are_fast_enough_and_exact():
    p = pack([1] * 4000 + [2] * 2000 + [4] * 1000, [4] * 500, 4)
    assert p.new_instances == (4000 + 4000 + 4000) // 4 - 500
