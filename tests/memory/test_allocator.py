"""The planner's per-stage peak against the CPU allocator's measured peak (``memory.allocator``)."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gpipe_repro.memory.allocator import allocator_peak, check_amoebanet

# The tolerance the Table 1 report states for its small configurations (K = 1, fp32).
TOLERANCE = 0.05


def test_the_allocator_peak_is_the_high_water_mark_of_a_known_sequence():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        a = torch.empty(1_000_000)  # 4 MB
        b = torch.empty(500_000)  # 2 MB: 6 MB live
        del a
        c = torch.empty(750_000)  # 3 MB: 5 MB live
        del b, c
    assert 6_000_000 <= allocator_peak(prof) < 6_000_000 + 4096


@pytest.mark.parametrize("checkpoint", ["never", "always"])
def test_the_planned_peak_is_within_the_tolerance_of_the_allocators(checkpoint):
    (one,) = check_amoebanet(6, 16, 1, 4, checkpoint, 16, [12])
    assert one.state > 0 and one.measured > one.state
    assert abs(one.error) <= TOLERANCE, (one.planned, one.measured)
