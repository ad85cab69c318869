"""Per-layer costs measured on the present device, at each micro-batch size the simulator needs.

For every micro-batch size ``n`` the layers run in sequence on real activations (layer i's input
is layer i-1's output) and each layer is timed alone, as it runs inside a pipeline cell:

- ``forward_nograd_s``: forward under ``no_grad`` (the first pass of a rematerialised micro-batch);
- ``forward_s``: graph-building forward (also the recompute under remat, paper §2.3), with the
  engine's saved-tensor accounting hooks on (``engine.memory.ActivationMeter``) and its micro-batch
  BatchNorm (``engine.batchnorm``), as in a cell;
- ``backward_s``: backward through that layer only, its input requiring grad (layer 0's input is
  data and does not); gradients accumulate as they do over a step's micro-batches;
- ``out_bytes``: bytes of everything the layer returns (both tensors of a pair);
- ``update_s``: one optimiser step on the layer's parameters (RMSProp by default, the paper's
  optimiser, §4), measured once per layer: it does not depend on the micro-batch size.

The last layer's forward and backward include the loss when ``loss_fn`` is given, as in the engine.
With ``normalize_to=ref`` the speed probe (``sim.speed``) runs just before each timed run and the
run's three figures are scaled to the reference speed (``speed.normalized``): a profile taken over
minutes on a machine whose speed drifts lands on one scale (``LayerProfile.raw`` keeps the
unscaled figures beside).
Each figure is the **median** of ``repeats`` timed runs after ``warmup`` untimed ones. The median,
not the minimum: the simulated step is compared with the engine's median step, in which every layer
call is a typical call rather than the luckiest one; and the median stays put when up to half of
the runs are disturbed by other processes on the cores. ``stat="min"`` gives the minimum instead.

Per-sample cost is not proportional to the micro-batch size on this CPU (ENVIRONMENT.md): weights
are re-read per micro-batch and small operations run far from peak. So each size is measured, and
``measure.MeasuredCosts`` interpolates between them.

Layers identical in structure and input shape (the Transformer's repeated layers, the normal cells
of one AmoebaNet stack) do the same work: they are measured once per size and the record reused
(``cache.structure`` plus the input shapes is the key), so a 48-layer stack costs about one layer.
Layers are timed on copies; the caller's layers are left untouched. ``torch.set_num_threads`` is
the caller's choice and part of the cache key.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from ..engine.batchnorm import commit as commit_batchnorm
from ..engine.batchnorm import convert_batchnorm
from ..engine.memory import ActivationMeter
from . import cache, speed
from .costs import LayerCost

__all__ = ["LayerProfile", "profile_layers", "STATS"]

Batch = torch.Tensor | tuple[torch.Tensor, ...]
SampleFn = Callable[[int], tuple[Batch, Any]]  # n -> (one micro-batch of n inputs, its targets)
LossFn = Callable[..., torch.Tensor]  # (output, targets) -> mean loss
OptimizerFn = Callable[[list[nn.Parameter]], torch.optim.Optimizer]
STATS = ("median", "min")


@dataclass
class LayerProfile:
    """Measured per-layer costs at each micro-batch size in ``sizes``."""

    sizes: list[int]
    costs: dict[int, list[LayerCost]]  # micro-batch size -> one record per layer
    key: dict = field(default_factory=dict)  # what the measurement depended on (the cache key)
    distinct: int = 0  # layers actually timed (the others reused an identical layer's record)
    source: str = "measured"  # "measured" or "cache"
    # with ``normalize_to``: the unscaled figures (``costs`` are at the reference speed) and the
    # median probe seconds over the profile
    raw: dict[int, list[LayerCost]] | None = None
    probe_s: float | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "sizes": self.sizes,
            "distinct": self.distinct,
            "costs": {str(n): [asdict(c) for c in cs] for n, cs in self.costs.items()},
        }
        if self.raw is not None:
            out["raw"] = {str(n): [asdict(c) for c in cs] for n, cs in self.raw.items()}
            out["probe_s"] = self.probe_s
        return out

    @classmethod
    def from_json(cls, data: dict, key: dict) -> LayerProfile:
        sizes = [int(n) for n in data["sizes"]]
        costs = {n: [LayerCost(**c) for c in data["costs"][str(n)]] for n in sizes}
        raw = (
            {n: [LayerCost(**c) for c in data["raw"][str(n)]] for n in sizes}
            if "raw" in data
            else None
        )
        return cls(sizes, costs, key, int(data["distinct"]), "cache", raw, data.get("probe_s"))


def _rmsprop(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(params, lr=1e-4)


def _as_tuple(x: Batch) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, tuple):
        return tuple(t.to(device) for t in x)
    return x.to(device) if torch.is_tensor(x) else x


def _input(x: Batch, requires_grad: bool) -> Batch:
    """A fresh leaf copy of ``x``, its float tensors requiring grad (a pipeline cell's input)."""
    ts = [t.detach().requires_grad_(requires_grad and t.is_floating_point()) for t in _as_tuple(x)]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stat(xs: list[float], stat: str) -> float:
    return min(xs) if stat == "min" else statistics.median(xs)


def _time_layer(
    layer: nn.Module,
    x: Batch,
    targets: Any,
    loss_fn: LossFn | None,
    first: bool,
    device: torch.device,
    warmup: int,
    repeats: int,
    stat: str,
    ref: float | None = None,
) -> tuple[LayerCost, LayerCost, Batch, list[float]]:
    """Time one layer at one micro-batch; return its record (at the reference speed when ``ref``
    is given), its unscaled record, its output (detached) and the probe seconds of each timed run."""

    def run() -> tuple[Batch, torch.Tensor | None]:
        y = layer(xin)
        return y, (loss_fn(y, targets) if loss_fn is not None else None)

    nograd, fwd, bwd = [], [], []
    probes: list[float] = []
    grads: list[torch.Tensor] | None = None
    y: Batch = x
    meter = ActivationMeter(layer.parameters())  # the engine counts what autograd saves, per op
    for r in range(warmup + repeats):
        p = speed.probe_s() if ref is not None else 1.0
        xin = _input(x, not first)
        with torch.no_grad():  # entered outside the timed region, as the engine does per cell
            _sync(device)
            t0 = time.perf_counter()
            run()
            _sync(device)
            t1 = time.perf_counter()
        xin = _input(x, not first)
        with meter.record(r):
            _sync(device)
            t2 = time.perf_counter()
            y, loss = run()
            _sync(device)
            t3 = time.perf_counter()
        if loss is not None:
            outs, grads = [loss], None
        else:
            outs = [t for t in _as_tuple(y) if t.requires_grad]
            if grads is None:  # made once, outside the timed region
                grads = [torch.ones_like(t) for t in outs]
        _sync(device)
        t4 = time.perf_counter()
        if outs:
            torch.autograd.backward(outs, grads)
        _sync(device)
        t5 = time.perf_counter()
        meter.release(r)
        commit_batchnorm(layer)  # the engine folds micro-batch statistics once per step, untimed
        if r >= warmup:
            nograd.append(t1 - t0)
            fwd.append(t3 - t2)
            bwd.append(t5 - t4)
            probes.append(p)
    out_bytes = sum(t.numel() * t.element_size() for t in _as_tuple(y))

    def record(scale: list[float]) -> LayerCost:
        return LayerCost(
            forward_s=_stat([t * k for t, k in zip(fwd, scale)], stat),
            forward_nograd_s=_stat([t * k for t, k in zip(nograd, scale)], stat),
            backward_s=_stat([t * k for t, k in zip(bwd, scale)], stat),
            out_bytes=int(out_bytes),
        )

    raw = record([1.0] * len(fwd))
    cost = record([ref / p for p in probes]) if ref is not None else raw
    return cost, raw, _input(y, False), (probes if ref is not None else [])


def _time_update(
    layer: nn.Module,
    optimizer_fn: OptimizerFn,
    device: torch.device,
    warmup: int,
    repeats: int,
    stat: str,
) -> float:
    params = [p for p in layer.parameters() if p.requires_grad]
    if not params:
        return 0.0
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    opt = optimizer_fn(params)
    times = []
    for r in range(warmup + repeats):  # the first step allocates the optimiser state: warm-up
        _sync(device)
        t0 = time.perf_counter()
        opt.step()
        _sync(device)
        if r >= warmup:
            times.append(time.perf_counter() - t0)
    return _stat(times, stat)


def _check(micro_batches: Sequence[int], repeats: int, warmup: int, stat: str) -> list[int]:
    sizes = sorted({int(n) for n in micro_batches})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"micro_batches={list(micro_batches)} is invalid; allowed: integers >= 1")
    if repeats < 1:
        raise ValueError(f"repeats={repeats} is invalid; allowed: an integer >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup} is invalid; allowed: an integer >= 0")
    if stat not in STATS:
        raise ValueError(f"stat={stat!r} is unknown; allowed: {', '.join(STATS)}")
    return sizes


def profile_layers(
    layers: Sequence[nn.Module],
    sample_fn: SampleFn,
    micro_batches: Sequence[int],
    *,
    device: torch.device | str = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    loss_fn: LossFn | None = None,
    optimizer_fn: OptimizerFn | None = None,
    stat: str = "median",
    use_cache: bool = True,
    normalize_to: float | None = None,
) -> LayerProfile:
    """Measure every layer at every micro-batch size in ``micro_batches``.

    ``sample_fn(n)`` returns one micro-batch of ``n`` model inputs and its targets (the targets are
    used only by ``loss_fn``, which must return the mean loss over the micro-batch). With
    ``use_cache`` a stored profile for the same key is loaded instead of measuring (see ``cache``);
    the key names the loss and optimiser functions by their qualified names, so two different
    lambdas look alike: pass ``use_cache=False`` or named functions when that matters.
    ``normalize_to``: the probe's seconds at the reference speed (``speed.reference_s()``); every
    figure is then scaled to that speed, the unscaled ones kept in ``LayerProfile.raw``.
    """
    sizes = _check(micro_batches, repeats, warmup, stat)
    if normalize_to is not None and not normalize_to > 0:
        raise ValueError(f"normalize_to={normalize_to} is invalid; allowed: positive seconds")
    dev = torch.device(device)
    optimizer_fn = optimizer_fn or _rmsprop
    samples = {n: sample_fn(n) for n in sizes}
    key = {
        "device": cache.device_name(dev),
        "device_type": dev.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sizes": sizes,
        "repeats": repeats,
        "warmup": warmup,
        "stat": stat,
        "hooks": True,  # forward timed with the engine's saved-tensor hooks
        "normalize_to": normalize_to,
        "loss": getattr(loss_fn, "__qualname__", None) if loss_fn else None,
        "optimizer": getattr(optimizer_fn, "__qualname__", type(optimizer_fn).__qualname__),
        "layers": cache.key_digest([cache.structure(layer) for layer in layers]),
        "inputs": {str(n): cache.tensor_shapes(_as_tuple(samples[n][0])) for n in sizes},
    }
    if use_cache and (stored := cache.load("layers", key)) is not None:
        try:
            return LayerProfile.from_json(stored, key)
        except (KeyError, TypeError, ValueError):
            pass  # corrupt content: measure again
    profile = _measure(
        layers, samples, sizes, dev, repeats, warmup, loss_fn, optimizer_fn, stat, normalize_to
    )
    profile.key = key
    if use_cache:
        cache.save("layers", key, profile.to_json())
    return profile


def _measure(
    layers: Sequence[nn.Module],
    samples: dict[int, tuple[Batch, Any]],
    sizes: list[int],
    device: torch.device,
    repeats: int,
    warmup: int,
    loss_fn: LossFn | None,
    optimizer_fn: OptimizerFn,
    stat: str,
    ref: float | None = None,
) -> LayerProfile:
    xs = {n: _input(_to(samples[n][0], device), False) for n in sizes}
    targets = {n: _to(samples[n][1], device) for n in sizes}
    costs: dict[int, list[LayerCost]] = {n: [] for n in sizes}
    raws: dict[int, list[LayerCost]] = {n: [] for n in sizes}
    probes: list[float] = []
    seen: dict[str, tuple[LayerCost, LayerCost]] = {}
    updates: dict[str, float] = {}
    distinct = 0
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        # a copy (the caller's layer keeps its state and buffers), with the engine's micro-batch BatchNorm
        lay = convert_batchnorm(copy.deepcopy(layer)).to(device)
        shape = cache.key_digest(cache.structure(lay))
        timed = False
        for n in sizes:
            lf = loss_fn if last else None
            k = cache.key_digest(
                [shape, cache.tensor_shapes(_as_tuple(xs[n])), i == 0, lf is not None]
            )
            if k in seen:
                with torch.no_grad():  # an identical layer was timed: only carry the activations on
                    xs[n] = _input(lay(xs[n]), False)
                cost, raw = seen[k]
            else:
                cost, raw, xs[n], ps = _time_layer(
                    lay, xs[n], targets[n], lf, i == 0, device, warmup, repeats, stat, ref
                )
                probes += ps
                seen[k] = (cost, raw)
                timed = True
            costs[n].append(cost)
            raws[n].append(raw)
        if timed:
            distinct += 1
        if shape not in updates:
            updates[shape] = _time_update(lay, optimizer_fn, device, warmup, repeats, stat)
        for n in sizes:  # the update is timed without probes: it is a small share of a step
            costs[n][i] = LayerCost(**{**asdict(costs[n][i]), "update_s": updates[shape]})
            raws[n][i] = LayerCost(**{**asdict(raws[n][i]), "update_s": updates[shape]})
        del lay
    if ref is None:
        return LayerProfile(sizes, costs, distinct=distinct)
    return LayerProfile(
        sizes,
        costs,
        distinct=distinct,
        raw=raws,
        probe_s=statistics.median(probes) if probes else None,
    )
