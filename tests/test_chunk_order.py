"""``bench/chunk_order.py``: bad input is one line and exit 2; the two orders run the same actions of
the rank's two cells, one cell after the other against interleaved 1F1B's alternation; a run
times every action once and leaves no gradient behind."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from _shared import bench_module
from torch import nn


@pytest.fixture
def order(monkeypatch):
    return bench_module("chunk_order", monkeypatch)


def test_bad_input_is_one_line_and_exit_2(order, capsys):
    for argv, key in (
        (["--models", "nope"], "--models 'nope'"),
        (["--M", "3"], "--M=3"),
        (["--stage", "2"], "--stage=2"),
        (["--repeats", "0"], "--repeats=0"),
    ):
        assert order.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and key in err[0], (argv, err)


@pytest.mark.parametrize("stage", [0, 1])
def test_both_orders_run_the_same_actions_of_the_ranks_two_cells(order, stage):
    M = 4
    got = order.orders(stage, M)
    turn, inter = got["in turn"], got["interleaved"]
    assert Counter(turn) == Counter(inter)
    cells = {c for c, _, _ in turn}
    assert cells == {stage, stage + order.K}
    assert Counter(kind for _, kind, _ in turn) == {"F": 2 * M, "B": 2 * M}
    first = turn[0][0]  # in turn: every action of one cell before any of the other's
    n = len(turn) // 2
    assert {c for c, _, _ in turn[:n]} == {first} and {c for c, _, _ in turn[n:]} == cells - {first}
    switches = sum(a[0] != b[0] for a, b in zip(inter, inter[1:]))
    assert switches > 1  # interleaved alternates the cells
    for o in (turn, inter):  # each backward after its forward
        seen = set()
        for c, kind, mb in o:
            if kind == "F":
                seen.add((c, mb))
            else:
                assert (c, mb) in seen


def test_a_run_times_each_kind_and_leaves_no_gradient(order):
    torch.manual_seed(0)
    cells = [nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 4), nn.Tanh())]
    x = torch.randn(2, 4)
    inputs = [x, cells[0](x).detach()]
    grads = {0: (torch.ones(2, 4),), 1: (torch.ones(2, 4),)}
    o = [(0, "F", 0), (1, "F", 0), (1, "B", 0), (0, "B", 0)]
    spent = order._run(o, cells, inputs, lambda out, y: out.sum(), None, grads)
    assert set(spent) == {"F", "B"} and spent["F"] > 0 and spent["B"] > 0
    assert all(p.grad is None for c in cells for p in c.parameters())
