"""This CPU as a published-style roofline profile, from micro-benchmarks only (no model is timed).

So that the roofline (``sim.roofline``) can be checked on the one device whose per-layer costs can be
measured here (``measure.roofline_check``, ``make validate-hw``), this CPU is described the way a
published device is, each field measured with one intra-op thread, as the engine's ranks run:

- ``peak_flops_fp32`` and the efficiency curve: square fp32 matmuls of 16 .. 1024, the best rate of
  several runs each; the peak is the fastest, the curve each size's rate over it (made
  non-decreasing in size);
- ``mem_bandwidth_Bps``: a 64 MiB copy, bytes read and written per second;
- ``op_min_s``: one eager operator call with autograd recording (a one-element add), the shortest
  any counted operation takes;
- the link, the per-action overhead and whether a send occupies its sender: this device's calibration
  (``device.device_model``, or the one the caller already has).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ..roofline import HardwareProfile
from .device import DeviceModel, device_model, host_memory_bytes

__all__ = ["cpu_roofline", "op_floor_s"]

SQUARES = (16, 32, 64, 128, 256, 512, 1024)


def _fastest(fn: Callable[[], object], runs: int = 5) -> float:
    fn()  # first touch, untimed
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def op_floor_s(calls: int = 2000) -> float:
    """Seconds of one eager operator call with autograd recording (a one-element add)."""
    x = torch.zeros(1, requires_grad=True)

    def chain() -> None:
        y = x
        for _ in range(calls):
            y = y + 1.0

    return statistics.median(_fastest(chain, 1) for _ in range(5)) / calls


def cpu_roofline(dm: DeviceModel | None = None) -> HardwareProfile:
    """This CPU's roofline profile (see the module doc); one intra-op thread. ``dm``: this device's
    calibration when the caller has one (else calibrated, or read from the cache)."""
    torch.set_num_threads(1)
    rates: list[tuple[float, float]] = []  # (FLOPs of one matmul, FLOP/s)
    for n in SQUARES:
        a, b = torch.rand(n, n), torch.rand(n, n)
        reps = max(1, int(3e7 // (2 * n**3)))  # keep each timed run near 10 ms

        def run(a: torch.Tensor = a, b: torch.Tensor = b, reps: int = reps) -> None:
            for _ in range(reps):
                torch.mm(a, b)

        t = _fastest(run) / reps
        rates.append((2.0 * n**3, 2.0 * n**3 / t))
    peak = max(r for _, r in rates)
    curve, best = [], 0.0
    for flops, r in rates:
        best = max(best, min(1.0, r / peak))
        curve.append((flops, best))
    src = torch.rand(16 << 20)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * src.element_size() / _fastest(lambda: dst.copy_(src))
    dm = dm or device_model()
    return HardwareProfile(
        name="cpu",
        precision="fp32",
        peak_flops_fp32=peak,
        peak_flops_half=peak,  # no faster half-precision path here
        efficiency_curve=tuple(curve),
        mem_bandwidth_Bps=bandwidth,
        memory_bytes=host_memory_bytes(),
        op_min_s=op_floor_s(),
        overhead_s=dm.overhead_s,
        link_hops=1,
        link_latency_s=dm.link.latency_s,
        link_bandwidth_Bps=dm.link.bandwidth_Bps,
        send_occupies_sender=dm.sender_busy,
    )
