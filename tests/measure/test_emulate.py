"""Emulation mode: layers that sleep their calibrated cost inside the real engine."""

from __future__ import annotations

import time
from dataclasses import replace

import _emulation_workers as w
import pytest
import torch
from torch import nn

from gpipe_repro.engine import Event, launch, measured_bubble
from gpipe_repro.engine.checkpoint import uses_remat
from gpipe_repro.engine.split import Tape, backward_input, backward_weight
from gpipe_repro.measure import emulate
from gpipe_repro.measure.emulate import emulated_layers
from gpipe_repro.models.amoebanet import amoebanet_layers
from gpipe_repro.models.toy import mlp_layers, tokennet_layers, tuplenet_layers
from gpipe_repro.sim.costs import LayerCost


def _cost(f: float = 1e-3, ng: float | None = None, b: float | None = None) -> LayerCost:
    return LayerCost(
        forward_s=f,
        forward_nograd_s=f if ng is None else ng,
        backward_s=2 * f if b is None else b,
        out_bytes=0,
    )


def _specs(x) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in (x if isinstance(x, tuple) else (x,))]


class KeepTokens(nn.Module):
    """tokens -> (embedding, tokens): a layer whose output carries integer ids along."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 6)

    def forward(self, tok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.emb(tok), tok


@pytest.mark.parametrize("name", ["mlp", "tuplenet", "tokennet", "amoebanet"])
def test_emulated_outputs_have_the_real_shapes(name):
    torch.manual_seed(0)
    layers, x = {
        "mlp": (mlp_layers(48, 16, 2, 5), torch.randn(4, 3, 4, 4)),
        "tuplenet": (tuplenet_layers(3, 8, 2, 5), torch.randn(4, 3, 8, 8)),
        "tokennet": (tokennet_layers(20, 8, 16, 2), torch.randint(0, 20, (4, 7))),
        "amoebanet": (
            amoebanet_layers("D", 3, 8, classes=10, in_channels=3),
            torch.randn(2, 3, 16, 16),
        ),
    }[name]
    em = emulated_layers(layers, x, [_cost(0.0)] * len(layers))
    real, fake = x, x
    with torch.no_grad():
        for la, e in zip(layers, em):
            real, fake = la(real), e(fake)
            assert _specs(fake) == _specs(real)
            assert isinstance(fake, tuple) == isinstance(real, tuple)


def test_layers_built_on_the_meta_device_give_the_same_emulation():
    # A paper-size model can be emulated without allocating it: only its structure is used.
    x = torch.randn(2, 3, 16, 16)
    real = emulated_layers(amoebanet_layers("D", 3, 8, classes=10), x, [_cost(0.0)] * 9)
    with torch.device("meta"):
        meta_layers = amoebanet_layers("D", 3, 8, classes=10)
    meta = emulated_layers(meta_layers, x, [_cost(0.0)] * 9)
    assert [(e.in_specs, e.out_specs, e.out_tuple) for e in meta] == [
        (e.in_specs, e.out_specs, e.out_tuple) for e in real
    ]


def test_integer_outputs_pass_through_and_wrong_inputs_are_refused():
    tok = torch.randint(0, 20, (3, 5))
    (em,) = emulated_layers([KeepTokens()], tok, [_cost(0.0)])
    h, out = em(tok)
    assert out is tok and h.shape == (3, 5, 6) and h.dtype == torch.float32 and h.requires_grad
    with pytest.raises(ValueError, match="was built for inputs"):
        em(torch.randint(0, 20, (4, 5)))


def test_emulated_layer_sleeps_at_least_its_costs_and_connects_autograd():
    f, ng, b = 0.03, 0.005, 0.04
    (em,) = emulated_layers([nn.Linear(8, 6)], torch.randn(2, 8), [_cost(f, ng, b)])
    x = torch.randn(2, 8, requires_grad=True)
    t0 = time.perf_counter()
    with torch.no_grad():
        y0 = em(x)
    t_ng = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = em(x)
    t_f = time.perf_counter() - t0
    t0 = time.perf_counter()
    y.sum().backward()
    t_b = time.perf_counter() - t0
    assert not y0.requires_grad and y.shape == (2, 6) and y.grad_fn is not None
    assert t_ng >= ng and t_f >= f and t_b >= b
    assert x.grad is not None and x.grad.shape == x.shape
    assert em.weight.grad is not None


def test_each_pass_sleeps_its_own_cost(monkeypatch):
    # Which duration each pass asks for, independent of how busy the cores are: the no-grad pass
    # (the first pass of a rematerialised micro-batch) forward_nograd_s, the graph-building pass
    # (also the recompute) forward_s, backward backward_s.
    f, ng, b = 0.3, 0.1, 0.5
    asked: list[float] = []
    monkeypatch.setattr(emulate, "sleep_until", lambda d: asked.append(d - time.perf_counter()))
    (em,) = emulated_layers([nn.Linear(8, 6)], torch.randn(2, 8), [_cost(f, ng, b)])
    x = torch.randn(2, 8, requires_grad=True)
    with torch.no_grad():
        em(x)
    em(x).sum().backward()
    assert asked == [
        pytest.approx(ng, abs=0.05),
        pytest.approx(f, abs=0.05),
        pytest.approx(b, abs=0.05),
    ]


def test_under_a_split_schedule_b_sleeps_the_layers_b_and_w_its_w(monkeypatch):
    # zb-h1 runs each layer's backward as B (input gradient) then W (weight gradient): the emulated
    # layer must spend the profiled B in B and W in W, not its whole backward in each
    f, whole, b, w_s = 0.3, 0.5, 0.2, 0.7
    asked: list[float] = []
    monkeypatch.setattr(emulate, "sleep_until", lambda d: asked.append(d - time.perf_counter()))
    cost = replace(_cost(f, f, whole), backward_input_s=b, backward_weight_s=w_s)
    (em,) = emulated_layers([nn.Linear(8, 6)], torch.randn(2, 8), [cost], split=True)
    x = torch.randn(2, 8, requires_grad=True)
    tape = Tape()
    y = em(x)
    tape.record(x, y)
    (gx,) = backward_input(tape, [torch.ones_like(y)], [y], list(em.parameters()))
    assert em.weight.grad is None and gx is not None and gx.shape == x.shape
    backward_weight(tape)
    assert em.weight.grad is not None
    assert asked == [pytest.approx(v, abs=0.05) for v in (f, b, w_s)]
    # the first layer (its input needs no gradient): nothing in B, W its own cost
    asked.clear()
    tape = Tape()
    x0 = torch.randn(2, 8)
    y = em(x0)
    tape.record(x0, y)
    assert backward_input(tape, [torch.ones_like(y)], [y], list(em.parameters())) == []
    backward_weight(tape)
    assert asked == [pytest.approx(v, abs=0.05) for v in (f, w_s)]


def _counts(events: list[dict], step: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        if e["step"] == step:
            out[e["action"]] = out.get(e["action"], 0) + 1
    return out


MODES = ("never", "except_last", "always")
K_MAX = 4


def _configs(K: int) -> list[dict]:
    """Both schedules, M = 1..2K (M < K included), the remat policy cycling."""
    return [
        {"M": M, "schedule": s, "checkpoint": MODES[(M + i) % 3]}
        for i, s in enumerate(("gpipe", "1f1b"))
        for M in range(1, 2 * K + 1)
    ]


TIMED = [_cost(0.02, b=0.04), _cost(0.03, b=0.05)]  # K = 2, one layer per stage
SPLIT_CONFIGS = [  # zb-h1 on layers emulated with B and W apart, K = 2
    {"M": M, "schedule": "zb-h1", "checkpoint": MODES[M % 3]} for M in range(1, 5)
]


@pytest.fixture(scope="module")
def emulated_runs() -> dict:
    """One launch of 4 ranks runs every phase: K = 1..4 over all configurations (gloo's timeout,
    60 s, bounds every wait, so a deadlock fails instead of hanging), then the timed K = 2 run."""
    layers = tuplenet_layers(3, 4, 4, 5)  # 6 layers, tuple boundaries between stages
    em = emulated_layers(layers, torch.randn(2, 3, 4, 4), [_cost(1e-3)] * len(layers))
    timed = emulated_layers([nn.Linear(16, 16), nn.Linear(16, 16)], torch.randn(4, 16), TIMED)
    runs = [(K, em, _configs(K), 2, None) for K in range(1, K_MAX + 1)]
    runs.append((2, timed, [{"M": 1}], 4, [1, 1]))
    split = emulated_layers(
        layers, torch.randn(2, 3, 4, 4), [_cost(1e-3)] * len(layers), split=True
    )
    runs.append((2, split, SPLIT_CONFIGS, 2, None))
    t0 = time.perf_counter()
    per_rank = launch(w.phases, K_MAX, (runs,), threads=1)
    print(
        f"emulation launch: {time.perf_counter() - t0:.1f} s; in-rank seconds per phase:",
        [max(r[p]["seconds"] for r in per_rank if r[p]) for p in range(len(runs))],
    )
    return {"per_rank": per_rank}


@pytest.mark.slow
@pytest.mark.parametrize("K", range(1, K_MAX + 1))
def test_engine_in_emulation_mode_runs_every_schedule_and_M_without_deadlock(emulated_runs, K):
    configs = _configs(K)
    phase = [r[K - 1] for r in emulated_runs["per_rank"]]
    ran = [p for p in phase if p is not None]
    assert len(ran) == (K_MAX // K) * K  # every rank of every pipeline came back
    for rank, p in enumerate(ran):
        assert len(p["results"]) == len(configs)
        for res, cfg in zip(p["results"], configs):
            assert res["stage"] == rank % K and res["config"] == cfg
            M = cfg["M"]
            remat = sum(uses_remat(cfg["checkpoint"], m, M) for m in range(M))
            for step in (0, 1):
                c = _counts(res["events"], step)
                assert c["forward"] == M and c["backward"] == M and c.get("recompute", 0) == remat
                assert c["step"] == 1 and c["update"] == 1


@pytest.mark.slow
def test_a_split_schedule_runs_on_layers_emulated_with_b_and_w_apart(emulated_runs):
    # tuple boundaries, M < K and M > K, remat cycling: each micro-batch's B and W on every stage
    phase = [r[K_MAX + 1] for r in emulated_runs["per_rank"][:2]]
    for p in phase:
        assert len(p["results"]) == len(SPLIT_CONFIGS)
        for res, cfg in zip(p["results"], SPLIT_CONFIGS):
            c = _counts(res["events"], 1)
            # the model's first cell: its B only takes the gradient (no span), W runs it all
            b = 0 if res["stage"] == 0 else cfg["M"]
            assert c["forward"] == c["weight"] == cfg["M"], (res["stage"], cfg)
            assert c.get("backward", 0) == b, (res["stage"], cfg)


@pytest.mark.slow
def test_emulated_step_time_at_K2_M1_is_the_sum_of_the_sleeps(emulated_runs):
    # K = 2, M = 1, one layer per stage, no remat: the step is F0, F1, B1, B0 in a chain, so its
    # compute span is f0 + f1 + b1 + b0 plus one activation and one gradient transfer (tiny here)
    # and the sleeps' overshoot. Tolerance: at least the sum, at most 10% + 15 ms above it.
    phase = [r[K_MAX] for r in emulated_runs["per_rank"][:2]]
    events = [
        Event(**e)
        for p in phase
        for e in p["results"][0]["events"]
        if e["action"] not in ("step", "update")
    ]
    predicted = sum(c.forward_s + c.backward_s for c in TIMED)
    spans = sorted(measured_bubble([e for e in events if e.step == s], 2)[0] for s in range(1, 4))
    span = spans[1]  # median of the steps after the first (which includes the shape handshake)
    print(f"K=2 M=1 emulated step {span * 1e3:.1f} ms, sum of sleeps {predicted * 1e3:.1f} ms")
    assert predicted <= span <= 1.10 * predicted + 0.015
