"""A rank's compute right after it was blocked runs slower: the post-idle penalty of this host, measured.

A pipeline stage alternates computing and waiting. Blocked in a receive, its thread sleeps and its
(virtual) core idles; when the message comes the work that follows runs slower for a while than the
same work back to back — the core's clock and caches come back up to speed (how much on a host,
for a forward and backward of half of each validation model after tens of milliseconds idle:
``python bench/cold_after_wait.py``). The layer profile times every layer back to back (``stream``), so it
never sees this, and the link's wake-up (``link``: when a blocked receiver *sees* its message) does
not either: it is compute, after the wake-up.

``measure_idle`` measures it as the wake-up is measured, per blocked time of
``link.WAKE_BLOCKED_S``: a workload of a few milliseconds (longer than the slow spell it measures)
timed right after the thread slept that long against the same workload timed back to back, the
blocked times shuffled together, the median of each. The excess is the penalty at that blocked time
(0 where noise makes it negative). The workload is the device calibration's reference model
(``device``: small linear layers, forward and backward through autograd, repeated): a training
step's interpreter, dispatcher and autograd work, which is what slows down — a bare matmul loop of the
same length, whose state fits the core's cache, showed a third of the penalty. The simulator charges
it to a receiver that blocked, beside its wake-up (``device.DeviceModel.ranks_link``: the ranks of one
run on this host; an emulated rank sleeps through its compute and does not pay it).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from . import cache
from .link import WAKE_BLOCKED_S

__all__ = ["IDLE_WORK_S", "measure_idle", "add_points"]

IDLE_WORK_S = 6e-3  # the workload's length back to back, about (longer than the slow spell)


def _run(work: Callable[[], None], reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        work()
    return time.perf_counter() - t0


def measure_idle(
    work: Callable[[], None],
    blocked: Sequence[float] = WAKE_BLOCKED_S[1:],
    *,
    repeats: int = 25,
    seed: int = 0,
    use_cache: bool = True,
    key: dict | None = None,
) -> tuple[tuple[float, float], ...]:
    """Points (seconds blocked, extra seconds the following compute takes) for this host: ``work``
    (one call of the workload; repeated to about ``IDLE_WORK_S``) timed after each blocked time and
    back to back (module doc); cached like the other calibrations under ``key`` (what ``work`` is)."""
    times = sorted({float(b) for b in blocked})
    if not times or times[0] <= 0 or repeats < 1:
        raise ValueError(
            f"blocked={list(blocked)}, repeats={repeats} are invalid; allowed: seconds > 0, "
            "repeats >= 1"
        )
    full_key = {
        "device": cache.device_name("cpu"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "blocked": times,
        "repeats": repeats,
        "work_s": IDLE_WORK_S,
        "work": key or {},
    }
    if use_cache and (stored := cache.load("idle", full_key)) is not None:
        try:
            return tuple((float(b), float(p)) for b, p in stored["points"])
        except (KeyError, TypeError, ValueError):
            pass
    for _ in range(5):
        work()  # first calls, untimed
    one = min(_run(work, 3) for _ in range(5)) / 3
    reps = max(1, round(IDLE_WORK_S / one))
    order = [t for t in [0.0, *times] for _ in range(repeats)]
    random.Random(seed).shuffle(order)
    got: dict[float, list[float]] = {t: [] for t in [0.0, *times]}
    for t in order:
        if t > 0:
            time.sleep(t)
        else:
            _run(work, reps)  # back to back: right after the same work
        got[t].append(_run(work, reps))
    warm = statistics.median(got[0.0])
    points = tuple((t, max(0.0, statistics.median(got[t]) - warm)) for t in times)
    if use_cache:
        cache.save("idle", full_key, {"points": [list(p) for p in points], "warm_s": warm})
    return points


def add_points(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> tuple[tuple[float, float], ...]:
    """Two delay curves (seconds blocked, extra seconds; linear between points from (0, 0), the
    last value beyond, as ``Link.wake_s``) summed on the union of their points."""
    from ..costs import Link

    la, lb = Link(1.0, 1.0, wake=tuple(a)), Link(1.0, 1.0, wake=tuple(b))
    xs = sorted({x for x, _ in a} | {x for x, _ in b})
    return tuple((x, la.wake_s(x) + lb.wake_s(x)) for x in xs)
