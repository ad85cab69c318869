"""A backward split into B (input gradient) and W (weight gradient): the same gradients as one
backward, none of B's work done again in W, and the same bits wherever the stages are cut."""

import copy

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpipe_repro.data.base import DataInfo
from gpipe_repro.engine.microbatch import as_tuple
from gpipe_repro.engine.split import Tape, backward_input, backward_weight, cut
from gpipe_repro.models import get_model, materialize
from gpipe_repro.models.toy import tuplenet_layers

MODELS = {  # the paper's two models, small, and the toy whose cells pass (current, previous)
    "tuplenet": None,
    "transformer_lm": (dict(L=2, d=16, H=32, A=2, dropout=0.0), DataInfo("tokens", (6,), 20)),
    "amoebanet_d": (dict(L=3, D=4, dropout=0.0), DataInfo("image", (3, 9, 9), 5)),
}


def _model(name):
    """Fresh layers (the same weights every call), a batch and the loss."""
    if name == "tuplenet":
        torch.manual_seed(0)
        layers = tuplenet_layers(3, 8, 6, 5, dropout=0.0, batchnorm=True)
        g = torch.Generator().manual_seed(1)
        x, t = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)
        return layers, x, t, nn.functional.cross_entropy
    spec = get_model(name)
    options, info = MODELS[name]
    with torch.device("meta"):
        plan = spec.layers(info, spec.config(**options))
    layers = materialize(copy.deepcopy(plan), 7, first_index=0)
    g = torch.Generator().manual_seed(1)
    if info.kind == "image":
        x, t = torch.randn(8, *info.shape, generator=g), torch.randint(0, 5, (8,), generator=g)
    else:
        x = torch.randint(0, 20, (8, 6), generator=g)
        t = torch.randint(0, 20, (8, 6), generator=g)
    return layers, x, t, spec.loss_fn


def _plain(name):
    layers, x, t, loss_fn = _model(name)
    h = x
    for layer in layers:
        h = layer(h)
    loss_fn(h, t).backward()
    return [p.grad.clone() for layer in layers for p in layer.parameters()]


def _split(name, cuts):
    """B then W over stages cut at ``cuts`` (each stage's input a fresh leaf, as a transfer makes
    it); W of every stage after every B."""
    layers, x, t, loss_fn = _model(name)
    bounds = [0, *cuts, len(layers)]
    stages, h = [], x
    for a, b in zip(bounds, bounds[1:]):
        tape = Tape()
        for layer in layers[a:b]:
            y = layer(h)
            h = tape.record(h, y)
        stages.append((tape, y, [p for layer in layers[a:b] for p in layer.parameters()]))
        h = cut(y)
    outs, grads = [loss_fn(stages[-1][1], t)], [None]
    got: list = []
    for i in reversed(range(len(stages))):
        tape, y, params = stages[i]
        if i < len(stages) - 1:
            outs = list(dict.fromkeys(o for o in as_tuple(y) if o.requires_grad))
            grads = [g if g is not None else torch.zeros_like(o) for g, o in zip(got, outs)]
        got = backward_input(tape, grads, outs, params)
        assert all(p.grad is None for p in params)  # B leaves the weights alone
    for tape, _, _ in stages:
        backward_weight(tape)
    return [p.grad.clone() for layer in layers for p in layer.parameters()]


def test_b_then_w_equals_one_backward_and_any_cut_gives_the_same_bits():
    for name in MODELS:
        plain = _plain(name)
        whole = _split(name, [])
        assert all(g is not None for g in whole), name
        err = max(
            ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
            for a, b in zip(whole, plain)
        )
        assert err <= 1e-6, (name, err)
        n = len(_model(name)[0])
        for cuts in ([n // 2], list(range(1, n))):
            again = _split(name, cuts)
            assert all(torch.equal(a, b) for a, b in zip(again, whole)), (name, cuts)


def test_w_does_none_of_bs_work_again():
    """The floating-point operations of B and W together are those of one backward: W re-runs only
    the nodes that feed a weight, asking for the weight's gradient alone."""
    torch.manual_seed(0)
    layers = [
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.LayerNorm(32))
        for _ in range(3)
    ]
    x = torch.randn(16, 32, requires_grad=True)

    def forward(tape=None):
        h = x
        for layer in layers:
            y = layer(h)
            h = tape.record(h, y) if tape is not None else y
        return y

    y = forward()
    with FlopCounterMode(display=False) as whole:
        y.backward(torch.ones_like(y))
    tape = Tape()
    y = forward(tape)
    params = [p for layer in layers for p in layer.parameters()]
    with FlopCounterMode(display=False) as b:
        backward_input(tape, [torch.ones_like(y)], [y], params)
    with FlopCounterMode(display=False) as w:
        backward_weight(tape)
    assert b.get_total_flops() + w.get_total_flops() == whole.get_total_flops()
    # each linear's backward is two matrix products of equal size: B one, W the other
    assert b.get_total_flops() == w.get_total_flops()


def test_b_keeps_the_gradients_w_needs_and_w_frees_them():
    """Between B and W a micro-batch holds its graph and, per weight-carrying node, the gradient that
    reached it (here each linear's output gradient and the LayerNorm's); W consumes them."""
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.LayerNorm(8))
    x = torch.randn(4, 8, requires_grad=True)
    tape = Tape()
    y = layer(x)
    tape.record(x, y)
    backward_input(tape, [torch.ones_like(y)], [y], list(layer.parameters()))
    kept = list(tape.kept())
    # LayerNorm's output gradient (4x8), the second linear's output gradient (4x8), the first's
    # (4x16): the gradients at the three nodes that feed a weight
    assert sorted(t.numel() for t in kept) == [32, 32, 64]
    assert tape.nbytes_kept() == 4 * (32 + 32 + 64)
    backward_weight(tape)
    assert tape.work == [] and all(p.grad is not None for p in layer.parameters())
