"""Every configuration of a model measured on this machine, with the simulator's validation's cells.

A configuration is (K, M, schedule, remat per stage, partition) at the cells' fixed mini-batch.
Configurations sharing K run in one launch of fresh ranks (``ranks``, each cell
with its own partition): K <= 2 with the real engine (``real_rank``: each step put on the
reference speed by the speed probe before it), K = 4, 8 in emulation (``emulated_rank``: every layer
sleeps its profiled cost times the group's dilation, ``calibration.emulation_dilation``, so that
the engine's own CPU work of K ranks does not queue for the 2 cores as it would not on K devices;
``planner.collect`` puts the step back on the device's time scale). ``rounds``
rounds, each launching every group again in a new random order; a configuration's figure is the
median of all its timed steps, each round's median kept for the repeatability.

Per-stage peak memory: real cells measure it in the first round (``real_rank(memory=True)``: one
more step under the allocator's profiler). Emulated cells allocate no real activations, so their
configurations get one more launch of the real engine with K real ranks, one warm-up and the
profiled step, no timing (K ranks on 2 cores are slow, not wrong, for memory).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import launch
from ..sim.measured import LayerProfile
from ..sim.measured.speed import normalized
from . import ranks
from .calibration import dilated

__all__ = ["Measured", "measure_configs", "REAL_K"]

REAL_K = 2  # K x replicas up to this run for real
TIMEOUT_S = 120.0  # the process group's bound on every wait


@dataclass
class Measured:
    step_s: float  # median of every timed step
    rounds: list[float]  # each round's median
    wait: float  # median share of a step a rank waited for a core
    peaks: list[int] = field(default_factory=list)  # per stage, bytes
    dilation: float = 1.0  # emulated: the layers slept this many times their profiled cost


Key = tuple[Any, ...]  # (K, M, schedule, checkpoint per stage, balance)


def _cell(key: Key) -> dict:
    """A configuration as the ranks run it; a balance of K·v cells: v cells per rank (#39)."""
    K, M, schedule, checkpoint, balance = key
    v = len(balance) // K
    cell = {"M": M, "schedule": schedule, "checkpoint": list(checkpoint), "balance": list(balance)}
    return cell | ({"virtual_stages": v} if v > 1 else {})


def _same(cell: dict) -> tuple[Any, ...]:
    return (cell["M"], cell["schedule"], tuple(cell["checkpoint"]), tuple(cell["balance"]))


def _launch(model: str, K: int, ks: list[Key], args: tuple[Any, ...], emulated: bool) -> dict:
    """One launch of K fresh ranks over the configurations ``ks``; their ``CellTimes`` by key."""
    cells = [_cell(k) for k in ks]
    first = [model, K, cells[0]["balance"], cells]
    fn = ranks.emulated_rank if emulated else ranks.real_rank
    got = launch(fn, K, (*first, *args), threads=1)
    by = {_same(ct.cell): ct for ct in ranks.step_times(got)}
    return {k: by[_same(_cell(k))] for k in ks}


def measure_configs(
    model: str,
    keys: Sequence[Key],
    profile: LayerProfile,
    ref: float | None,
    rounds: int,
    warmup: int,
    steps: int,
    seed: int,
    log: Callable[[str], None],
    dilation: Callable[[int], float] = lambda K: 1.0,
    emulated_steps: tuple[int, int] | None = None,
) -> dict[Key, Measured]:
    """Measure every configuration in ``keys`` (module doc); ``ref``: the speed probe's reference
    (None: real steps are not normalised); ``dilation(K)``: how many times its cost an emulated
    layer sleeps; ``emulated_steps``: (warm-up, timed) steps of the emulated configurations
    (None: ``warmup``, ``steps``)."""
    groups: dict[int, list[Key]] = {}
    for k in dict.fromkeys(keys):
        groups.setdefault(k[0], []).append(k)
    rng = random.Random(f"{seed}-{model}")
    times: dict[Key, list[list[float]]] = {k: [] for g in groups.values() for k in g}
    waits: dict[Key, list[float]] = {k: [] for k in times}
    peaks: dict[Key, list[int]] = {}
    for r in range(rounds):
        order = list(groups.items())
        rng.shuffle(order)
        for K, ks in order:
            ks = ks[:]
            rng.shuffle(ks)
            t0 = time.perf_counter()
            real = K <= REAL_K
            if real:
                got = _launch(model, K, ks, (warmup, steps, TIMEOUT_S, r == 0), False)
            else:
                w, n = emulated_steps or (warmup, steps)
                slept = dilated(profile.costs, dilation(K))
                got = _launch(model, K, ks, (slept, w, n, TIMEOUT_S), True)
            for k, ct in got.items():
                ts = ct.times
                if real and ref is not None and ct.probes:
                    ts = [normalized(t, statistics.median(ct.probes), ref) for t in ts]
                times[k].append(ts)
                waits[k].extend(ct.waits)
                if ct.peaks:
                    peaks[k] = ct.peaks
            kind = "real" if real else "emulated"
            log(
                f"{model} K={K} ({kind}) round {r + 1}/{rounds}: {len(ks)} configurations in "
                f"{time.perf_counter() - t0:.0f} s"
            )
    for K, ks in groups.items():  # emulated: the memory with real ranks, untimed
        if K <= REAL_K:
            continue
        t0 = time.perf_counter()
        for k, ct in _launch(model, K, ks, (1, 0, TIMEOUT_S, True), False).items():
            peaks[k] = ct.peaks
        log(
            f"{model} K={K}: memory of {len(ks)} configurations in {time.perf_counter() - t0:.0f} s"
        )
    return {
        k: Measured(
            statistics.median(t for ts in times[k] for t in ts),
            [statistics.median(ts) for ts in times[k]],
            statistics.median(waits[k]) if waits[k] else 0.0,
            peaks.get(k, []),
            1.0 if k[0] <= REAL_K else dilation(k[0]),
        )
        for k in times
    }
