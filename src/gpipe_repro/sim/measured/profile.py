"""Per-layer costs measured on the present device, at each micro-batch size the simulator needs.

At every micro-batch size ``n`` the whole model runs as one stage would run it (``stream``): M
micro-batches of n in a row, kept and rematerialised, each layer timed inside the stream. From the
timed calls, per layer (``stat``: the median by default):

- ``forward_s``: the forward with grad (the kept step's);
- ``recompute_s``: the forward with grad again under remat (the remat step's; it skips what only a
  first forward does, BatchNorm's statistics, so it may be cheaper; its extra cost per action is
  ``LayerProfile.recompute_overhead_s``);
- ``forward_nograd_s``: the no-grad forward (the first pass of a rematerialised micro-batch);
- ``backward_s``: the layer's share of the cell's backward (kept and remat steps together), plus its
  share of releasing the micro-batch's autograd graph afterwards (``stream.release``: the engine frees
  a micro-batch's graph when its backward action ends, a gap no engine span covers);
- ``backward_input_s``, ``backward_weight_s``: that backward as zero bubble splits it, B (the input
  gradient) and W (the weight gradient), each scaled by its cost over a whole backward when the
  three are timed beside each other (``split``: the split's own overhead included; the first layer
  of a model has no B);
- ``out_bytes``: bytes of everything the layer returns (both tensors of a pair);
- ``update_s``: what the layer costs once per step after its last action: folding its BatchNorm
  statistics of the stream's M micro-batches (``engine.batchnorm.commit``) and one optimiser step
  on its parameters with the zeroing of their gradients after it (RMSProp by default, the paper's
  optimiser, §4), both timed at the end of each step of the stream as a rank runs them
  (``stream``).

``check_recompute`` asserts what the engine guarantees: a recompute is the forward again, so a
profile in which the recompute (or the no-grad forward) costs more than the forward plus the
recompute's own overhead, by more than the noise of the calls (their interquartile range), was not
taken as the engine incurs it and is refused with an error naming the size and the figures. A stream
is timed again when its check fails (``checked_stream``, ``CHECK_TRIES`` in all): a moment of another
process's load on a shared CPU passes, a profiler that times the wrong thing fails every time.

Stream length: ``stream`` maps each size to its M (an int: the same M everywhere); by default the sizes
are read as the micro-batches of one mini-batch of ``max(sizes)`` samples, so size n runs
M = max(sizes) // n micro-batches (every size of a sweep over M at a fixed batch).

Layers identical in structure and input shape (the Transformer's repeated layers, the normal cells of
one AmoebaNet stack) do the same work: they share one record, the statistic over all their calls.
With ``normalize_to=ref`` the speed probe (``speed``) runs before every timed step and each call is put
on the reference speed (``LayerProfile.raw`` keeps the unscaled records). Layers are timed on copies;
``torch.set_num_threads`` is the caller's choice and part of the cache key.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

from ...engine.microbatch import Batch, as_tuple
from ..costs import LayerCost
from . import cache, speed
from .split import split_factors
from .stream import StreamTimes, fresh_input, time_stream

__all__ = [
    "LayerProfile",
    "ProfileError",
    "profile_layers",
    "median_profile",
    "records",
    "check_recompute",
    "checked_stream",
    "stream_lengths",
    "groups_of",
    "profile_key",
    "split_backward",
    "STATS",
]

SampleFn = Callable[[int], tuple[Batch, Any]]  # n -> (one micro-batch of n inputs, its targets)
LossFn = Callable[..., torch.Tensor]  # (output, targets) -> mean loss
OptimizerFn = Callable[[list[nn.Parameter]], torch.optim.Optimizer]
STATS = ("median", "min")


class ProfileError(RuntimeError):
    """A profile contradicts how the engine runs (a recompute dearer than the forward it repeats)."""


@dataclass
class LayerProfile:
    """Measured per-layer costs at each micro-batch size in ``sizes``."""

    sizes: list[int]
    costs: dict[int, list[LayerCost]]  # micro-batch size -> one record per layer
    key: dict = field(default_factory=dict)  # what the measurement depended on (the cache key)
    distinct: int = 0  # distinct layers (identical ones share a record)
    source: str = "measured"  # "measured" or "cache"
    # with ``normalize_to``: the unscaled figures (``costs`` are at the reference speed) and the
    # median probe seconds over the profile
    raw: dict[int, list[LayerCost]] | None = None
    probe_s: float | None = None
    recompute_overhead_s: float = 0.0  # per recompute action: restoring the RNG state, contexts

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "sizes": self.sizes,
            "distinct": self.distinct,
            "costs": {str(n): [asdict(c) for c in cs] for n, cs in self.costs.items()},
            "recompute_overhead_s": self.recompute_overhead_s,
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
        return cls(
            sizes,
            costs,
            key,
            int(data["distinct"]),
            "cache",
            raw,
            data.get("probe_s"),
            float(data.get("recompute_overhead_s", 0.0)),
        )


def _median_costs(runs: Sequence[list[LayerCost]], where: str) -> list[LayerCost]:
    """Field by field, the median of one size's records over several profiles of the same layers
    (a split time stays None where any profile lacks it)."""
    if len({len(r) for r in runs}) != 1 or len({tuple(c.out_bytes for c in r) for r in runs}) != 1:
        raise ValueError(
            f"{where}: the profiles differ in their layers; allowed: profiles of one model"
        )

    def mid(values: Sequence[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.median(got) if len(got) == len(values) else None

    out = []
    for cs in zip(*runs, strict=True):
        times = {
            name: mid([getattr(c, name) for c in cs])
            for name in asdict(cs[0])
            if name != "out_bytes"
        }
        out.append(LayerCost(out_bytes=cs[0].out_bytes, **times))  # type: ignore[arg-type]
    return out


def median_profile(profiles: Sequence[LayerProfile]) -> LayerProfile:
    """One profile from several of the same layers taken at different times: every figure the
    median of the profiles' figures (a profile is one stream of a few minutes, which the host's
    drift between minutes moves as a whole; the median of profiles spread over the run is the
    steadier estimate). ``key["passes"]`` records how many."""
    if not profiles:
        raise ValueError("profiles=[] is invalid; allowed: one profile or more")
    first = profiles[0]
    if any(p.sizes != first.sizes or p.distinct != first.distinct for p in profiles):
        raise ValueError(
            "the profiles differ in their sizes or layers; allowed: profiles of one model"
        )
    if len(profiles) == 1:
        return first
    raws = [p.raw for p in profiles if p.raw is not None]
    raw = None
    if len(raws) == len(profiles):
        raw = {n: _median_costs([r[n] for r in raws], f"raw size {n}") for n in first.sizes}
    probes = [p.probe_s for p in profiles if p.probe_s is not None]
    return replace(
        first,
        costs={n: _median_costs([p.costs[n] for p in profiles], f"size {n}") for n in first.sizes},
        key={**first.key, "passes": len(profiles)},
        raw=raw,
        probe_s=statistics.median(probes) if probes else None,
        recompute_overhead_s=statistics.median(p.recompute_overhead_s for p in profiles),
    )


# what the engine pays outside its spans, timed in the stream and charged to each layer: releasing a
# micro-batch's graph after its backward (in ``backward_s``), the BatchNorm commit and the optimiser's
# step with the zeroing of the gradients (in ``update_s``)
OUTSIDE_SPANS = ("release", "commit", "update")


def _rmsprop(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(params, lr=1e-4)


def _stat(xs: Sequence[float], stat: str) -> float:
    return min(xs) if stat == "min" else statistics.median(xs)


def _iqr(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def records(
    t: StreamTimes, groups: Sequence[int], stat: str, ref: float | None = None
) -> list[LayerCost]:
    """One ``LayerCost`` per layer from a stream (``update_s``: its BatchNorm commit and, where the
    stream timed one, its optimiser step); ``groups[i]`` names layer i's group of identical layers,
    whose calls are pooled into one record."""
    out = []
    shares = t.update_shares(ref)
    for i in range(t.layers):
        members = [j for j in range(t.layers) if groups[j] == groups[i]]
        # the optimiser's step (0 where the stream ran none), the same for identical layers
        update = statistics.fmean(shares[j] for j in members) if shares is not None else 0.0
        # None: the stream did not time that kind
        p = {
            kind: _stat(xs, stat) if xs else None
            for kind in ("forward", "nograd", "backward", "recompute", "release", "commit")
            for xs in [[x for j in members for x in t.samples(kind, j, ref)]]
        }
        forward, nograd, backward = p["forward"], p["nograd"], p["backward"]
        if forward is None or nograd is None or backward is None:
            raise ValueError(
                f"the stream timed no forward, no-grad forward or backward of layer {i}"
            )
        out.append(
            LayerCost(
                forward_s=forward,
                forward_nograd_s=nograd,
                # what the engine pays outside its spans (0 where the stream did not time it)
                backward_s=backward + (p["release"] or 0.0),
                out_bytes=t.out_bytes[i],
                update_s=(p["commit"] or 0.0) + update,
                recompute_s=p["recompute"],
            )
        )
    return out


def split_backward(
    costs: Sequence[LayerCost], factors: Sequence[tuple[float, float]]
) -> list[LayerCost]:
    """Each layer's B and W: its backward scaled by each part's measured cost over a whole backward
    (``split``)."""
    return [
        replace(c, backward_input_s=c.backward_s * b, backward_weight_s=c.backward_s * w)
        for c, (b, w) in zip(costs, factors, strict=True)
    ]


NOISE_FLOOR_REL = 0.05  # of the forward: the least spread a call timed again shows on a shared CPU
NOISE_FLOOR_S = 2e-6  # the clock read and the Python call around a timed action
# A recompute runs right after another micro-batch's backward, the kept forward right after the
# previous forward: each layer's first call after a backward costs more (its code and weights no
# longer warm), most for small layers at small micro-batches, where it reaches the noise and a
# profile of a small model failed without an allowance. `python bench/recompute_excess.py` measures
# the excess per layer; the allowance is above its largest value. Allowed per layer, above the noise:
RECOMPUTE_EXCESS_PER_LAYER_S = 15e-6


def check_recompute(t: StreamTimes, where: str, ref: float | None = None) -> float:
    """Raise ``ProfileError`` unless the recompute and the no-grad forward of the cell cost no more
    than its forward (the recompute: plus its overhead and ``RECOMPUTE_EXCESS_PER_LAYER_S`` per layer),
    up to the noise; returns the recompute's overhead."""
    fwd, rec, ngr = t.actions("forward", ref), t.actions("recompute", ref), t.actions("nograd", ref)
    over = statistics.median(t.overheads(ref))
    f, r, g = (statistics.median(x) for x in (fwd, rec, ngr))
    # the interquartile range of a few calls can be 0; a call timed twice on a shared CPU differs by
    # a few per cent and by the clock's own jitter, so the noise is never taken below that floor
    noise = max(_iqr(fwd), _iqr(rec), _iqr(ngr), NOISE_FLOOR_REL * f, NOISE_FLOOR_S)
    # seconds at this machine's speed; on the reference speed as the calls are when ``ref`` is given
    speed = statistics.median(ref / s.probe_s for s in t.steps) if ref is not None else 1.0
    cold = RECOMPUTE_EXCESS_PER_LAYER_S * t.layers * speed
    for name, v, allowed, what in (
        (
            "recompute",
            r,
            f + over + cold,
            f"forward {f * 1e3:.3f} ms + overhead {over * 1e3:.3f} ms + {cold * 1e3:.3f} ms for "
            f"its {t.layers} layer(s) called after a backward",
        ),
        ("no-grad forward", g, f, f"forward {f * 1e3:.3f} ms"),
    ):
        if v > allowed + noise:
            raise ProfileError(
                f"{where}: the {name} was profiled at {v * 1e3:.3f} ms per micro-batch, above the "
                f"{what} by more than the noise ({noise * 1e3:.3f} ms); allowed: at most that "
                "plus the noise (the engine recomputes the same forward) - profile again on a "
                "quiet machine"
            )
    return over


CHECK_TRIES = 3  # timings of one stream, before a failed check is the user's error


def checked_stream(
    time_it: Callable[[], StreamTimes], where: str, ref: float | None = None
) -> tuple[StreamTimes, float]:
    """``time_it()`` (one ``time_stream``) and its ``check_recompute``, timed again when the check
    fails, up to ``CHECK_TRIES`` timings; returns the times and the recompute's overhead."""
    for attempt in range(1, CHECK_TRIES + 1):
        t = time_it()
        try:
            return t, check_recompute(t, where, ref)
        except ProfileError as e:
            if attempt == CHECK_TRIES:
                raise ProfileError(f"{e} ({CHECK_TRIES} timings, each refused)") from None
    raise AssertionError("unreachable")


def stream_lengths(sizes: Sequence[int], stream: Mapping[int, int] | int | None) -> dict[int, int]:
    """M per size (see the module doc)."""
    if stream is None:
        return {n: max(1, max(sizes) // n) for n in sizes}
    if isinstance(stream, int):
        lengths = dict.fromkeys(sizes, stream)
    else:
        lengths = {n: int(stream[n]) for n in sizes if n in stream}
    bad = [n for n in sizes if lengths.get(n, 0) < 1]
    if bad:
        raise ValueError(
            f"stream={stream!r} gives no length >= 1 for sizes {bad}; allowed: an integer >= 1 or "
            "one per size"
        )
    return lengths


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


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, tuple):
        return tuple(t.to(device) for t in x)
    return x.to(device) if torch.is_tensor(x) else x


def groups_of(layers: Sequence[nn.Module], t: StreamTimes, first: int = 0) -> list[int]:
    """Index of the first layer identical to each (structure, input shapes, first or last of the
    model; ``first``: the global index of ``layers[0]``), as measured in stream ``t``."""
    seen: dict[str, int] = {}
    out = []
    for i, layer in enumerate(layers):
        key = cache.key_digest(
            [cache.structure(layer), t.in_shapes[i], first + i == 0, i == len(layers) - 1]
        )
        out.append(seen.setdefault(key, i))
    return out


def profile_key(
    device: torch.device,
    sizes: Sequence[int],
    lengths: Mapping[int, int],
    timing: tuple[int, int, str],
    loss_fn: LossFn | None,
    optimizer_fn: OptimizerFn,
    layers: Sequence[nn.Module],
) -> dict[str, Any]:
    """What a profile depends on (the cache key's common part): the device, torch, threads, sizes
    and stream lengths, the timing (repeats, warmup, statistic), the loss and optimiser, every
    layer's structure."""
    repeats, warmup, stat = timing
    return {
        "device": cache.device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sizes": list(sizes),
        "stream": [lengths[n] for n in sizes],
        "repeats": repeats,
        "warmup": warmup,
        "stat": stat,
        # timed inside a stage's stream of micro-batches, the collector's pauses charged (``stream``)
        "method": "stream-collector",
        "split": "B/W timed apart",  # the backward's division into B and W (``split``)
        "outside_spans": list(OUTSIDE_SPANS),
        "loss": getattr(loss_fn, "__qualname__", None) if loss_fn else None,
        "optimizer": getattr(optimizer_fn, "__qualname__", type(optimizer_fn).__qualname__),
        "layers": cache.key_digest([cache.structure(layer) for layer in layers]),
    }


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
    stream: Mapping[int, int] | int | None = None,
) -> LayerProfile:
    """Measure every layer at every micro-batch size in ``micro_batches`` (see the module doc).

    ``sample_fn(n)`` returns one micro-batch of ``n`` model inputs and its targets (the targets are
    used only by ``loss_fn``, which must return the mean loss over the micro-batch). With
    ``use_cache`` a stored profile for the same key is loaded instead of measuring (``cache``); the
    key names the loss and optimiser functions by their qualified names, so two different lambdas
    look alike: pass ``use_cache=False`` or named functions when that matters. ``normalize_to``: the
    probe's seconds at the reference speed (``speed.reference_s()``).
    """
    sizes = _check(micro_batches, repeats, warmup, stat)
    if normalize_to is not None and not normalize_to > 0:
        raise ValueError(f"normalize_to={normalize_to} is invalid; allowed: positive seconds")
    lengths = stream_lengths(sizes, stream)
    dev = torch.device(device)
    optimizer_fn = optimizer_fn or _rmsprop
    samples = {n: sample_fn(n) for n in sizes}
    key = {
        **profile_key(dev, sizes, lengths, (repeats, warmup, stat), loss_fn, optimizer_fn, layers),
        "normalize_to": normalize_to,
        "inputs": {str(n): cache.tensor_shapes(as_tuple(samples[n][0])) for n in sizes},
    }
    if use_cache and (stored := cache.load("layers", key)) is not None:
        try:
            return LayerProfile.from_json(stored, key)
        except (KeyError, TypeError, ValueError):
            pass  # corrupt content: measure again
    groups: list[int] = []
    costs: dict[int, list[LayerCost]] = {}
    raws: dict[int, list[LayerCost]] = {}
    probes: list[float] = []
    overheads: list[float] = []
    probe = speed.probe_s if normalize_to is not None else None
    for n in sizes:
        x, y = _to(samples[n][0], dev), _to(samples[n][1], dev)
        M = lengths[n]

        def time_it(x: Batch = x, y: torch.Tensor = y, M: int = M) -> StreamTimes:
            return time_stream(
                layers,
                [fresh_input(x, False) for _ in range(M)],
                [y] * M if loss_fn is not None else None,
                loss_fn,
                device=dev,
                warmup=warmup,
                repeats=repeats,
                probe=probe,
                optimizer_fn=optimizer_fn,
            )

        t, over = checked_stream(time_it, f"micro-batch {n} (M={M})", normalize_to)
        overheads.append(over)
        groups = groups or groups_of(layers, t)
        factors = split_factors(
            layers, x, y, loss_fn, groups, device=dev, warmup=warmup, repeats=repeats, stat=stat
        )
        costs[n] = split_backward(records(t, groups, stat, normalize_to), factors)
        raws[n] = split_backward(records(t, groups, stat), factors)
        probes += [s.probe_s for s in t.steps]
    profile = LayerProfile(
        sizes,
        costs,
        key,
        distinct=len(set(groups)),
        raw=raws if normalize_to is not None else None,
        probe_s=statistics.median(probes) if normalize_to is not None else None,
        recompute_overhead_s=statistics.median(overheads),
    )
    if use_cache:
        cache.save("layers", key, profile.to_json())
    return profile
