"""This host's speed at a moment: a short fixed workload timed (the *speed probe*).

On a shared or virtual machine the same single-threaded work does not take the same time from one
second to the next: a fixed matmul loop can alternate between phases some seconds long at different
speeds, and a training step follows those phases (``python bench/speed_drift.py`` draws both over a
minute, on the machine it runs on). Costs profiled in one phase and steps measured in another then
disagree by the machine's drift, whatever the simulator does.

The probe measures that drift: ``probe_s()`` times a fixed single-threaded matmul loop, short
enough to run before every timed run. A time ``t`` measured while the probe takes ``p`` seconds is ``t * ref / p`` seconds at the
*reference speed* — the speed at which the probe takes ``ref`` seconds (``reference_s()``, the
median of a few probes; any fixed value works, it cancels out of every ratio). Profiling
(``profile.profile_layers(normalize_to=ref)``) and the validation's measured steps
(``measure.ranks``) both probe just before each timed run, so both land on the same scale.

The probe is compute-bound and small enough to stay in cache; a memory-bound layer follows the
machine's phases less closely than it does, so normalising removes most of the drift, not all
of it (``reports/sim/sim.md`` shows the errors with and without it).
"""

from __future__ import annotations

import statistics
import time

import torch

__all__ = ["probe_s", "reference_s", "normalized", "PROBE_ITERS"]

PROBE_ITERS = 40  # (64 x 256) @ (256 x 256) matmuls: a few milliseconds on one core, in cache
_operands: tuple[torch.Tensor, torch.Tensor] | None = None


def _make() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(64, 256, generator=g), torch.randn(256, 256, generator=g)


def probe_s() -> float:
    """Seconds the fixed workload takes now, on the calling thread (the caller's thread count)."""
    global _operands
    if _operands is None:
        _operands = _make()
        x, a = _operands
        for _ in range(4):  # first touch and kernel selection, untimed
            torch.mm(x, a)
    x, a = _operands
    t0 = time.perf_counter()
    for _ in range(PROBE_ITERS):
        torch.mm(x, a)
    return time.perf_counter() - t0


def reference_s(samples: int = 15) -> float:
    """The median of ``samples`` probes: the unit that normalised times are expressed in."""
    if samples < 1:
        raise ValueError(f"samples={samples} is invalid; allowed: an integer >= 1")
    return statistics.median(probe_s() for _ in range(samples))


def normalized(t: float, probe: float, ref: float) -> float:
    """``t`` seconds measured while the probe took ``probe`` seconds, at the reference speed."""
    if probe <= 0 or ref <= 0:
        raise ValueError(f"probe={probe}, ref={ref} are invalid; allowed: positive seconds")
    return t * ref / probe
