"""Layers timed inside a stream of micro-batches, as a stage runs them (``sim.measured.stream``)."""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpipe_repro.sim.measured.profile import (
    CHECK_TRIES,
    RECOMPUTE_EXCESS_PER_LAYER_S,
    ProfileError,
    check_recompute,
    checked_stream,
    records,
    stream_lengths,
)
from gpipe_repro.sim.measured.stream import Step, StreamTimes, fresh_input, time_stream

FWD_S, BWD_S = 0.02, 0.03  # what the slow layer sleeps (far above the fast layers)


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        time.sleep(FWD_S)
        return x * 1.0

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        time.sleep(BWD_S)
        return g


class Slow(nn.Module):
    """Sleeps FWD_S in its forward and BWD_S in its backward, whatever the input."""

    def forward(self, x):
        if isinstance(x, tuple):
            return (_Sleep.apply(x[0]), x[1])
        return _Sleep.apply(x)


class Pair(nn.Module):
    """(current, previous) -> (new, current), as AmoebaNet's cells pass them."""

    def __init__(self, w: int) -> None:
        super().__init__()
        self.lin = nn.Linear(w, w)

    def forward(self, x):
        cur, prev = x if isinstance(x, tuple) else (x, x)
        return (torch.relu(self.lin(cur) + prev), cur)


class Head(nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.lin = nn.Linear(w, 10)

    def forward(self, x):
        return self.lin(x[0] if isinstance(x, tuple) else x)


@pytest.mark.usefixtures("one_thread")  # tests/conftest.py: as a rank runs
@pytest.mark.parametrize("tuples", [False, True])
def test_each_layer_is_charged_its_own_forward_backward_and_recompute(tuples):
    torch.manual_seed(0)
    w = 32
    if tuples:  # a slow layer between two that pass (current, previous)
        layers = [Pair(w), Slow(), Pair(w), Head(w)]
    else:
        layers = [nn.Linear(w, w), Slow(), nn.Linear(w, w), Head(w)]
    M = 3
    x = torch.randn(4, w)
    t = time_stream(
        layers,
        [fresh_input(x, False) for _ in range(M)],
        [torch.zeros(4, dtype=torch.long)] * M,
        F.cross_entropy,
        device=torch.device("cpu"),
        warmup=1,
        repeats=2,
    )
    assert t.micro_batches == M and len(t.steps) == 4  # a kept and a remat step per repeat
    for kind, least in (("forward", FWD_S), ("nograd", FWD_S), ("recompute", FWD_S)):
        assert len(t.samples(kind, 1)) == 2 * M
        assert min(t.samples(kind, 1)) >= least
        assert all(statistics.median(t.samples(kind, i)) < least / 4 for i in (0, 2, 3))
    # the backward of the whole cell is split at the layer boundaries, the sleep lands in layer 1
    # (medians for the fast layers: another process may take the core for a moment)
    assert len(t.samples("backward", 1)) == 4 * M  # both steps' backwards
    assert min(t.samples("backward", 1)) >= BWD_S
    assert all(statistics.median(t.samples("backward", i)) < BWD_S / 4 for i in (0, 2, 3))
    assert len(t.overheads()) == 2 * M and min(t.overheads()) > 0
    assert t.out_bytes[-1] == 4 * 10 * 4 and len(t.in_shapes) == 4


def _times(fwd: float, rec: float, nograd: float, over: float) -> StreamTimes:
    """Two steps of a one-layer cell, two micro-batches, every call the same."""
    kept = Step(1.0, forward=[[fwd], [fwd]], backward=[[1.0], [1.0]])
    remat = Step(
        1.0,
        nograd=[[nograd], [nograd]],
        recompute=[[rec], [rec]],
        backward=[[1.0], [1.0]],
        recompute_overhead=[over, over],
    )
    return StreamTimes(1, 2, [kept, remat], [8], [[]])


def test_a_recompute_dearer_than_forward_plus_overhead_is_refused():
    assert check_recompute(_times(1.0, 1.05, 0.8, 0.1), "here") == pytest.approx(0.1)
    with pytest.raises(ProfileError, match="here: the recompute was profiled at 2000.000 ms"):
        check_recompute(_times(1.0, 2.0, 0.8, 0.1), "here")
    with pytest.raises(ProfileError, match="no-grad forward"):
        check_recompute(_times(1.0, 1.0, 1.5, 0.1), "here")
    # a few calls can have no spread at all: a microsecond layer is not refused for its clock's jitter
    assert check_recompute(_times(5e-6, 5e-6, 6e-6, 1e-5), "tiny") == pytest.approx(1e-5)
    with pytest.raises(ProfileError, match="no-grad forward was profiled at 0.009 ms"):
        check_recompute(_times(5e-6, 5e-6, 9e-6, 1e-5), "tiny")


def test_a_recompute_after_a_backward_may_cost_a_few_microseconds_more_per_layer():
    # bench/recompute_excess.py: small layers at micro-batch 1 recompute 5-12 us per layer above
    # forward + overhead (their first calls after a backward); that passes, twice the forward does not
    L, fwd, over = 4, 35e-6, 25e-6
    kept = Step(1.0, forward=[[fwd] * L] * 2, backward=[[1.0] * L] * 2)

    def cell(rec_per_layer: float) -> StreamTimes:
        remat = Step(
            1.0,
            nograd=[[fwd] * L] * 2,
            recompute=[[rec_per_layer] * L] * 2,
            backward=[[1.0] * L] * 2,
            recompute_overhead=[over] * 2,
        )
        return StreamTimes(L, 2, [kept, remat], [8] * L, [[]] * L)

    excess = RECOMPUTE_EXCESS_PER_LAYER_S * 0.9
    assert check_recompute(cell(fwd + over / L + excess), "cell") == pytest.approx(over)
    with pytest.raises(ProfileError, match="for its 4 layer"):
        check_recompute(cell(2 * fwd + over / L), "cell")


def test_a_refused_timing_is_taken_again_and_one_refused_every_time_is_an_error():
    good, bad = _times(1.0, 1.05, 0.8, 0.1), _times(1.0, 2.0, 0.8, 0.1)
    calls: list[StreamTimes] = []

    def timings(*seq: StreamTimes):
        def time_it() -> StreamTimes:
            calls.append(seq[len(calls)])
            return calls[-1]

        return time_it

    t, over = checked_stream(timings(bad, bad, good), "here")  # a load that passed
    assert t is good and over == pytest.approx(0.1) and len(calls) == 3
    calls.clear()
    with pytest.raises(ProfileError, match=r"2000\.000 ms.*\(3 timings, each refused\)"):
        checked_stream(timings(bad, bad, bad, good), "here")  # what fails every time is refused
    assert len(calls) == CHECK_TRIES == 3


def test_records_pool_a_group_and_put_calls_on_the_reference_speed():
    t = StreamTimes(
        2,
        1,
        [Step(2.0, forward=[[1.0, 3.0]], backward=[[2.0, 2.0]]), Step(2.0, nograd=[[0.5, 0.5]])],
        [8, 8],
        [[], []],
    )
    apart = records(t, [0, 1], "median")
    assert [c.forward_s for c in apart] == [1.0, 3.0]
    pooled = records(t, [0, 0], "median")
    assert [c.forward_s for c in pooled] == [2.0, 2.0]  # the median of both layers' calls
    halved = records(t, [0, 1], "median", ref=1.0)  # probe 2.0 s at a reference of 1.0 s
    assert [c.forward_s for c in halved] == [0.5, 1.5] and halved[0].backward_s == 1.0


def test_records_charge_the_graph_release_to_the_backward_and_the_commit_to_the_update():
    # what the engine pays outside its spans: freeing a micro-batch's graph after its backward, and
    # folding BatchNorm statistics once per step
    t = StreamTimes(
        2,
        1,
        [
            Step(1.0, forward=[[1.0, 1.0]], backward=[[2.0, 3.0]], release=[[0.25, 0.5]]),
            Step(1.0, nograd=[[1.0, 1.0]], recompute=[[0.75, 1.0]], commit=[[0.125, 0.0]]),
        ],
        [8, 8],
        [[], []],
    )
    costs = records(t, [0, 1], "median")
    assert [c.backward_s for c in costs] == [2.25, 3.5]
    assert [c.update_s for c in costs] == [0.125, 0.0]
    # the recompute as the remat step timed it (BatchNorm's statistics are not taken again)
    assert [c.recompute for c in costs] == [0.75, 1.0]


@pytest.mark.usefixtures("one_thread")
def test_the_stream_times_a_release_per_backward_and_a_commit_per_step():
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU()), nn.Linear(8, 10)]
    M = 3
    t = time_stream(
        layers,
        [fresh_input(torch.randn(4, 8), False) for _ in range(M)],
        [torch.randint(0, 10, (4,))] * M,
        F.cross_entropy,
        device=torch.device("cpu"),
        warmup=0,
        repeats=1,
    )
    for step in t.steps:  # kept, then remat
        assert len(step.release) == M and all(len(r) == 2 for r in step.release)
        assert len(step.commit) == 1 and len(step.commit[0]) == 2
        assert all(x >= 0 for r in step.release for x in r)
    # the BatchNorm layer folds its statistics; the other has none to fold
    assert all(s.commit[0][0] > 0 and s.commit[0][1] == 0.0 for s in t.steps)


def test_stream_lengths():
    assert stream_lengths([1, 4, 32], None) == {1: 32, 4: 8, 32: 1}  # one mini-batch of 32
    assert stream_lengths([2, 8], 4) == {2: 4, 8: 4}
    assert stream_lengths([2, 8], {2: 16, 8: 4}) == {2: 16, 8: 4}
    with pytest.raises(ValueError, match="sizes \\[8\\]"):
        stream_lengths([2, 8], {2: 16})


OPT_CALL_S, OPT_TENSOR_S = 0.01, 0.005  # what the sleeping optimiser costs per call and per tensor


class SleepingOptimizer(torch.optim.Optimizer):
    """Sleeps OPT_CALL_S + OPT_TENSOR_S per tensor in a step, noting the gradients it was given."""

    seen: list[tuple[bool, list[int]]] = []  # per step: every gradient non-zero, their ids

    def __init__(self, params: list[nn.Parameter]) -> None:
        super().__init__(params, {})

    def step(self, closure=None):  # type: ignore[override]
        grads = [p.grad for g in self.param_groups for p in g["params"]]
        ok = all(g is not None and bool(g.any()) for g in grads)
        SleepingOptimizer.seen.append((ok, [id(g) for g in grads]))
        time.sleep(OPT_CALL_S + OPT_TENSOR_S * len(grads))


@pytest.mark.usefixtures("one_thread")
def test_each_step_ends_with_the_optimisers_step_on_the_streams_own_gradients():
    torch.manual_seed(0)
    w = 16
    layers = [nn.Linear(w, w), nn.ReLU(), Head(w)]  # 2 tensors, none, 2
    SleepingOptimizer.seen = []
    M, repeats = 2, 3
    t = time_stream(
        layers,
        [fresh_input(torch.randn(4, w), False) for _ in range(M)],
        [torch.zeros(4, dtype=torch.long)] * M,
        F.cross_entropy,
        device=torch.device("cpu"),
        warmup=1,
        repeats=repeats,
        optimizer_fn=SleepingOptimizer,
    )
    # a kept step: one optimiser over the cell, as a rank runs it; a remat step: one per layer
    kept = [s for s in t.steps if s.forward]
    remat = [s for s in t.steps if s.nograd]
    assert [len(s.update) for s in t.steps] == [1] * 2 * repeats
    assert all(len(s.update[0]) == 1 for s in kept) and all(len(s.update[0]) == 3 for s in remat)
    assert min(s.update[0][0] for s in kept) >= OPT_CALL_S + 4 * OPT_TENSOR_S
    assert all(s.update[0][1] == 0.0 for s in remat)  # no parameters, no optimiser
    # every step ran on the gradients its backwards left, zeroed in place after it (as a rank's
    # zero_grad(set_to_none=False)): the same tensors every step
    seen = SleepingOptimizer.seen
    assert seen and all(ok for ok, _ in seen)
    assert len({tuple(ids) for _, ids in seen if len(ids) == 4}) == 1
    # the cell's step divided among its layers by their own steps (each paid the fixed cost once)
    shares = t.update_shares()
    assert shares is not None and shares[1] == 0.0
    cell = statistics.median(s.update[0][0] for s in kept)
    assert sum(shares) == pytest.approx(cell)
    assert shares[0] == pytest.approx(shares[2], rel=0.2)
    # and each layer's record carries its share: the update the profile charges
    costs = records(t, [0, 1, 2], "median")
    assert [c.update_s for c in costs] == pytest.approx(shares)


def test_without_an_optimiser_no_update_is_timed():
    t = time_stream(
        [nn.Linear(4, 4), Head(4)],
        [fresh_input(torch.randn(2, 4), False)],
        [torch.zeros(2, dtype=torch.long)],
        F.cross_entropy,
        device=torch.device("cpu"),
        warmup=0,
        repeats=1,
    )
    assert all(not s.update for s in t.steps) and t.update_shares() is None
    assert all(c.update_s == 0.0 for c in records(t, [0, 1], "median"))
