"""A stage's peak activation bytes come from its own action list (``memory.activations``)."""

from __future__ import annotations

import pytest

from gpipe_repro.engine.errors import ArgumentError
from gpipe_repro.memory.activations import StageActivation, peak_activation_bytes

# graph = saved + weights = 50; one micro-batch's working set = work + work_fixed = 7
A = StageActivation(input=3, saved=40, output=7, weights=10, work=5, work_fixed=2)


def closed_form(schedule: str, checkpoint: str, K: int, M: int, k: int) -> int:
    """The table of the module doc (GPipe §2.3), written out: the working set once, on top; under
    1f1b a stage after the first with fewer than M micro-batches in flight also holds the input
    gradient it sent last (the previous stage takes it only after its next forward)."""
    n = M if schedule == "gpipe" else min(K - k, M)
    sent = A.input if schedule == "1f1b" and k > 0 and K - k < M else 0
    if checkpoint == "never":
        return n * (A.input + A.graph + A.output) + A.working + sent
    if checkpoint == "always":
        return n * A.input + A.graph + A.output + A.working + sent
    overlap = schedule == "1f1b" and M > 1 and K - k - 1 >= 1
    # a stage with warm-up forwards recomputes one micro-batch while it holds the kept last one
    return n * A.input + (A.graph + A.output) * (2 if overlap else 1) + A.working + sent


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("checkpoint", ["never", "except_last", "always"])
def test_the_walk_gives_the_papers_closed_forms(schedule, checkpoint):
    for K in (1, 2, 4):
        for M in (1, 2, 3, 8):
            for k in range(K):
                # no receive posted ahead (the engine's lookahead: tests/engine, tests/plan)
                got = peak_activation_bytes(A, schedule, checkpoint, K, M, k, lookahead=1)
                assert got == closed_form(schedule, checkpoint, K, M, k), (K, M, k)


def test_an_unknown_schedule_is_refused_not_read_as_1f1b():
    with pytest.raises(ArgumentError, match="schedule='zb-h2' is unknown"):
        peak_activation_bytes(A, "zb-h2", "never", 4, 8, 0)


def test_the_working_set_counts_once_whatever_the_micro_batches_alive():
    none = StageActivation(input=3, saved=40, output=7, weights=10)
    for schedule in ("gpipe", "1f1b"):
        for checkpoint in ("never", "except_last", "always"):
            for M in (1, 4):
                got = peak_activation_bytes(A, schedule, checkpoint, 2, M, 0)
                without = peak_activation_bytes(none, schedule, checkpoint, 2, M, 0)
                assert got - without == A.working, (schedule, checkpoint, M)


def test_scaling_a_stage_scales_the_working_sets_linear_part_only():
    a = A.scaled(4)
    assert (a.work, a.work_fixed, a.weights) == (20, 2, 10)
