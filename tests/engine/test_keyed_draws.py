"""Keyed randomness: with dropout on, the update is bit-identical whatever K and remat mode.

A layer's draws depend on (seed, step, micro-batch, global layer) only. So at a fixed M and schedule,
K = 1, 2 and 4 and every remat mode give bit-identical losses and parameters — on real processes,
for the project's MLP, Transformer LM, AmoebaNet-D and T(L, H, A). Across the two schedules the
draws and the first step's loss are the same too, but the parameters agree only to rounding: gpipe
accumulates the micro-batches' gradients in reverse order (B3, B2, ...), 1F1B in forward order, and
a float sum depends on its order. M is part of the experiment: other micro-batch boundaries are
other keys, so other masks (as they are other BatchNorm statistics).
"""

import copy
import itertools

import _model_workers as mw
import pytest
import torch
from torch import nn

from gpipe_repro.engine import Cell, Pipeline, launch, single_process
from gpipe_repro.engine.rng import draw_seed
from gpipe_repro.models.toy import tuplenet_layers

SCHEDS, REMAT = ["gpipe", "1f1b"], ["never", "except_last", "always"]


def test_keys_are_distinct_for_neighbouring_steps_micro_batches_and_layers():
    keys = {
        draw_seed(0, s, m, j) for s, m, j in itertools.product(range(-1, 8), range(8), range(8))
    }
    assert len(keys) == 9 * 8 * 8 and all(0 <= k < 2**63 for k in keys)
    assert draw_seed(1, 0, 0, 0) != draw_seed(0, 0, 0, 0)


def _drop_net() -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)) for _ in range(4)]


def test_a_layer_draws_the_same_in_any_cell_and_leaves_the_outer_stream_alone():
    """Two cells of two layers (first_layer 0 and 2) give what one cell of four gives: the draws
    follow the global layer index, not the cell. The caller's own stream goes on untouched."""
    from gpipe_repro.engine.rng import Draws

    cpu = torch.device("cpu")
    layers = _drop_net()
    whole = Cell(layers, draws=Draws(5, 0, cpu))
    head, tail = Cell(layers[:2], draws=Draws(5, 0, cpu)), Cell(layers[2:], draws=Draws(5, 2, cpu))
    x = torch.randn(16, 8)
    torch.manual_seed(1)
    with whole.keyed(3, 1):
        a = whole(x)
    after = torch.rand(3)
    torch.manual_seed(1)
    with head.keyed(3, 1), tail.keyed(3, 1):
        b = tail(head(x))
    assert torch.equal(a, b)
    assert torch.equal(torch.rand(3), after)  # as if no cell had drawn
    with whole.keyed(3, 2):
        assert not torch.equal(whole(x), a)  # another micro-batch, other masks
    with whole.keyed(4, 1):
        assert not torch.equal(whole(x), a)  # another step, other masks


def _pipe(M: int, schedule: str, checkpoint: str) -> Pipeline:
    torch.manual_seed(0)
    layers = tuplenet_layers(3, 8, 3, 5, dropout=0.5, batchnorm=True)
    return Pipeline(
        layers,
        single_process(),
        M=M,
        schedule=schedule,
        checkpoint=checkpoint,
        loss_fn=nn.functional.cross_entropy,
        seed=11,
    )


def _steps(pipe: Pipeline, steps: range) -> list[float]:
    opt = torch.optim.SGD(pipe.parameters(), lr=0.1)
    out = []
    for step in steps:
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)
        out.append(pipe.train_step(x, y, step))
        opt.step()
        opt.zero_grad()
    return out


def test_recompute_replays_the_draws_and_a_resumed_run_continues_the_keys():
    """In one process at M = 4: every remat mode gives the very same losses (recompute replays the
    keys), whatever the process's own stream; a fresh pipeline holding the weights after step 1
    continues with step 2's keys exactly."""
    base = _steps(_pipe(4, "gpipe", "never"), range(3))
    assert len(set(base)) == 3
    for mode, outer in (("except_last", 99), ("always", 98)):
        pipe = _pipe(4, "gpipe", mode)
        torch.manual_seed(outer)  # the process's stream plays no part
        assert _steps(pipe, range(3)) == base, mode
    first = _pipe(4, "gpipe", "always")
    _steps(first, range(2))
    resumed = _pipe(4, "gpipe", "always")
    resumed.cell.load_state_dict(copy.deepcopy(first.cell.state_dict()))
    assert _steps(resumed, range(2, 3)) == base[2:]
    unkeyed = _pipe(4, "gpipe", "never")
    unkeyed.cell.draws = None  # the process's stream: the masks are other ones
    assert _steps(unkeyed, range(1)) != base[:1]


def _losses(res: list[dict]) -> list[float]:
    return max(res, key=lambda r: r["stage"])["losses"]


def _state(res: list[dict]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for r in res:
        out.update(r["state"])
    return out


def run(K: int, runs: list[dict]) -> list[list[dict]]:
    if K == 1:
        return [[r] for r in mw.here(runs)]
    per_rank = launch(mw.grid, K, (K, runs), threads=1)
    return [[rank[i] for rank in per_rank] for i in range(len(runs))]


def assert_same(got: list[dict], want: list[dict], what: object) -> None:
    assert _losses(got) == _losses(want), what
    g, w = _state(got), _state(want)
    assert g.keys() == w.keys(), what
    for k in w:
        assert torch.equal(g[k], w[k]), (what, k, (g[k].float() - w[k].float()).abs().max())


def test_with_dropout_k2_equals_k1_bit_for_bit():
    """The fast case: a Transformer LM with dropout, K = 2 against K = 1, both schedules."""
    runs = [dict(model="transformer_lm", schedule=s, checkpoint="except_last") for s in SCHEDS]
    for cfg, one, two in zip(runs, run(1, runs), run(2, runs)):
        assert_same(two, one, cfg)


@pytest.mark.slow
def test_with_dropout_any_k_and_remat_is_bit_identical_for_every_model():
    """MLP, Transformer LM, AmoebaNet-D (its stem's (h, h) crossing at K = 4) and T(L, H, A):
    K = 1, 2, 4 x every remat mode equal K = 1 without remat, per schedule."""
    runs = [
        dict(model=m, schedule=s, checkpoint=c)
        for m, s, c in itertools.product(mw.PAPER_MODELS, SCHEDS, REMAT)
    ]
    ref_runs = runs + [dict(model=m, seed=mw.SEED + 1) for m in mw.PAPER_MODELS]
    one = run(1, ref_runs)
    by_k = {1: one[: len(runs)], 2: run(2, runs), 4: run(4, runs)}
    base = {
        (r["model"], r["schedule"]): res for r, res in zip(runs, one) if r["checkpoint"] == "never"
    }
    for K, results in by_k.items():
        for cfg, res in zip(runs, results):
            assert_same(res, base[(cfg["model"], cfg["schedule"])], (K, cfg))
    for m in mw.PAPER_MODELS:
        gpipe, f1b = base[(m, "gpipe")], base[(m, "1f1b")]
        assert _losses(gpipe)[0] == _losses(f1b)[0], m  # same draws: same first loss
        other_seed = one[len(runs) + mw.PAPER_MODELS.index(m)]
        assert _losses(other_seed)[0] != _losses(gpipe)[0], m  # dropout really draws


# The schedules since GPipe: (schedule, chunks per rank). A Transformer LM of 8 layers, so that
# K = 4 ranks hold 2 cells each; AmoebaNet-D's 9 layers likewise.
LATER = [("interleaved", 2), ("zb-h1", 1), ("zb-h1", 2)]
CHUNKED = ("transformer_lm6", "amoebanet_d")


def test_with_dropout_the_later_schedules_at_k2_equal_k1_bit_for_bit():
    """The fast case: the Transformer LM with dropout, interleaved and zb-h1 (one and two cells
    per rank), K = 2 against K = 1."""
    runs = [
        dict(model="transformer_lm6", schedule=s, checkpoint="except_last", virtual_stages=v)
        for s, v in LATER
    ]
    for cfg, one, two in zip(runs, run(1, runs), run(2, runs)):
        assert_same(two, one, cfg)


@pytest.mark.long
def test_with_dropout_the_later_schedules_are_bit_identical_at_any_k_and_remat():
    """Transformer LM and AmoebaNet-D, interleaved and zb-h1 (v = 1, 2), every remat mode, K = 1,
    2, 4: each equals K = 1 without remat. With B and W apart the tape cuts every layer's graph,
    so a stage boundary changes no node's request and no gradient sum's order."""
    runs = [
        dict(model=m, schedule=s, checkpoint=c, virtual_stages=v)
        for m, (s, v), c in itertools.product(CHUNKED, LATER, REMAT)
    ]
    one = run(1, runs)
    base = {
        (r["model"], r["schedule"], r["virtual_stages"]): res
        for r, res in zip(runs, one)
        if r["checkpoint"] == "never"
    }
    for K, results in {1: one, 2: run(2, runs), 4: run(4, runs)}.items():
        for cfg, res in zip(runs, results):
            assert_same(res, base[(cfg["model"], cfg["schedule"], cfg["virtual_stages"])], (K, cfg))


def test_against_gpipe_the_later_schedules_agree_to_rounding():
    """The same draws and the same first loss; after two SGD-momentum steps the second loss
    within 1e-6 relative and every weight and buffer within 1e-5 (weights of order 1): gpipe
    sums each weight's micro-batch gradients from the last micro-batch down, the others from the
    first up (one cell per rank, K = 1; across K each is bit-identical, above)."""
    runs = [
        dict(model=m, schedule=s, checkpoint="never", virtual_stages=v)
        for m in CHUNKED
        for s, v in [("gpipe", 1), *LATER]
    ]
    res = run(1, runs)
    for i, cfg in enumerate(runs):
        gpipe = res[i - i % (len(LATER) + 1)]
        if cfg["schedule"] == "gpipe":
            continue
        got, want = _losses(res[i]), _losses(gpipe)
        assert got[0] == want[0], cfg
        assert got[1] == pytest.approx(want[1], rel=1e-6, abs=0), cfg
        g, w = _state(res[i]), _state(gpipe)
        worst = max((g[k].float() - w[k].float()).abs().max().item() for k in w)
        assert worst <= 1e-5, (cfg, worst)
