"""The link between neighbouring stages, measured: latency and bandwidth of a real point-to-point
transfer over the engine's own backend (gloo on CPU, nccl on CUDA).

Two ranks, started with ``engine.launch``, play ping-pong: rank 0 sends ``n`` bytes, rank 1 sends
them back; the one-way time is half the round trip (the median over ``repeats``, after ``warmup``
untimed round trips). The points are fitted by ``t(n) = latency + n / bandwidth`` — weighted least
squares on relative residuals, so the small messages that fix the latency count as much as the
large ones that fix the bandwidth. A measured round trip includes both ranks' Python and backend
overheads, as every transfer in the engine does.

Then each rank times its own side of small ``isend`` / ``irecv`` calls: what posting a transfer costs
the calling thread (gloo's ``isend`` returns once posted and moves the data on its own threads, and
only after the receiver has posted its ``irecv``), the link's ``send_call_s`` and ``recv_call_s``.

Last, the wake-up of a blocked receiver (``Link.wake``): in a ping-pong a rank waits one round trip
for the next message, but a pipeline stage often waits milliseconds, and a thread blocked that long
(its core idle, on a virtual machine possibly halted by the hypervisor) sees a message later. Rank 1
posts a receive and blocks in it while rank 0 computes (spins) for ``blocked`` seconds, then sends its
clock (``time.perf_counter``: one monotonic clock for the processes of a host); rank 1's arrival time
minus that clock, less the same measured with no wait, is the extra delay at that blocking time. It
depends on the host (idle states, hypervisor), so it is measured, never assumed.

Results are cached like the layer profiles (see ``cache``), keyed by device, torch version, backend,
sizes and repeat counts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..costs import Link
from . import cache

__all__ = [
    "LinkProfile",
    "LinkUnmeasured",
    "UnmeasuredLink",
    "measure_link",
    "fit_link",
    "link_pairs",
    "WAKE_BLOCKED_S",
]

DEFAULT_SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 23)
# how long the receiver is blocked before the message is sent, for the wake-up points
WAKE_BLOCKED_S = (0.0, 0.5e-3, 2e-3, 8e-3, 30e-3)


class LinkUnmeasured(ValueError):
    """A run needs a link this device never measured (one line)."""


@dataclass(frozen=True)
class UnmeasuredLink(Link):
    """The link of a host that cannot pair two ranks on its devices (one GPU: nccl refuses two ranks
    on one device). A K = 1 run with one replica sends nothing and never asks it; anything that would
    send raises ``LinkUnmeasured`` with ``reason``, so no time is made up."""

    reason: str = "the link between two devices was not measured"

    def time(self, nbytes: float) -> float:
        raise LinkUnmeasured(self.reason)

    def allreduce_s(self, nbytes: int, replicas: int) -> float:
        if replicas == 1:
            return 0.0
        raise LinkUnmeasured(self.reason)


def link_pairs(device: str) -> str | None:
    """None where two ranks of this device type can be paired here (a CPU; two CUDA devices); else
    why not, in words (the reason an ``UnmeasuredLink`` gives)."""
    if device != "cuda":
        return None
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n >= 2:
        return None
    return (
        f"hardware=measured: the link between two GPUs was not measured ({n} CUDA device here; nccl "
        "cannot pair two ranks on one), so pipeline.K >= 2 and pipeline.replicas >= 2 cannot be "
        "costed on it; allowed here: K = 1 with one replica, or a published profile (hardware=h100)"
    )


@dataclass(frozen=True)
class LinkProfile:
    link: Link  # with the measured send_call_s / recv_call_s
    points: list[tuple[int, float]]  # (bytes, median one-way seconds)
    source: str = "measured"  # "measured" or "cache"


def fit_link(points: Sequence[tuple[int, float]]) -> Link:
    """Least-squares fit of ``t = latency + n / bandwidth`` with relative weights.

    Noise can drive the fitted intercept or slope to zero or below; the latency then falls back to
    the smallest one-way time, and the bandwidth to the largest message's bytes over its time above
    that latency, so both stay positive."""
    n = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    if len(points) >= 2 and len(set(n.tolist())) >= 2:
        slope, latency = np.polyfit(n, t, 1, w=1.0 / t)
    else:
        slope, latency = 0.0, float(t.min())
    if latency <= 0:
        latency = float(t[np.argmin(n)])
    if slope <= 0:
        i = int(np.argmax(n))
        slope = max(float(t[i]) - latency, 1e-12) / n[i]
    return Link(latency_s=float(latency), bandwidth_Bps=float(1.0 / slope))


def _ping_pong(
    sizes: list[int], repeats: int, warmup: int, device: str, timeout_s: float
) -> tuple[list[tuple[int, float]], float, list[tuple[float, float]]]:
    """One rank of the measurement (module level, so spawned ranks can import it): rank 0's points
    (empty on rank 1), the median time this rank's thread spends in one ``isend`` (rank 0) or
    ``irecv`` (rank 1) call of a small tensor — the backend moves the data afterwards — and rank 1's
    wake-up points (empty on rank 0)."""
    import torch.distributed as dist

    from ...engine.topology import init_topology

    topo = init_topology(2, device=device, timeout_s=timeout_s)
    dev = topo.device
    peer = 1 - topo.rank
    points = []
    for n in sizes:
        buf = torch.zeros(n, dtype=torch.uint8, device=dev)
        rtts = []
        for r in range(warmup + repeats):
            if topo.rank == 0:
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                dist.send(buf, peer)
                dist.recv(buf, peer)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if r >= warmup:
                    rtts.append(time.perf_counter() - t0)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
        if topo.rank == 0:
            points.append((n, statistics.median(rtts) / 2))
    small = torch.zeros(1024, dtype=torch.uint8, device=dev)
    calls = []
    for r in range(warmup + 4 * repeats):
        dist.barrier()
        t0 = time.perf_counter()
        work = dist.isend(small, peer) if topo.rank == 0 else dist.irecv(small, peer)
        t1 = time.perf_counter()
        if work is not None:
            work.wait()
        if r >= warmup:
            calls.append(t1 - t0)
    dist.barrier()
    return points, statistics.median(calls), _wake(topo.rank, peer, dev, repeats, warmup)


def _wake(
    rank: int, peer: int, dev: torch.device, repeats: int, warmup: int
) -> list[tuple[float, float]]:
    """(blocked seconds, extra seconds before the blocked receiver sees the message), on rank 1."""
    import torch.distributed as dist

    stamp = torch.zeros(16, dtype=torch.float64, device=dev)  # a clock reading needs float64
    arrivals: dict[float, float] = {}
    for blocked in WAKE_BLOCKED_S:
        lat = []
        for r in range(warmup + repeats):
            dist.barrier()
            if rank == 0:
                end = time.perf_counter() + blocked
                while time.perf_counter() < end:  # computing, as the sending stage is
                    pass
                stamp[0] = time.perf_counter()
                dist.send(stamp, peer)
            else:
                dist.recv(stamp, peer)
                arrived = time.perf_counter()
                if r >= warmup:
                    lat.append(arrived - float(stamp[0]))
        if rank == 1:
            arrivals[blocked] = statistics.median(lat)
    dist.barrier()
    if rank == 0:
        return []
    base = arrivals[WAKE_BLOCKED_S[0]]
    return [(b, max(0.0, arrivals[b] - base)) for b in WAKE_BLOCKED_S[1:]]


def measure_link(
    sizes_bytes: Sequence[int] = DEFAULT_SIZES,
    *,
    device: str = "cpu",
    repeats: int = 20,
    warmup: int = 3,
    use_cache: bool = True,
    timeout_s: float = 60.0,
) -> LinkProfile:
    """Measure one-way transfer time between two local ranks at each size and fit a ``Link``."""
    sizes = sorted({int(n) for n in sizes_bytes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes_bytes={list(sizes_bytes)} is invalid; allowed: integers >= 1")
    if repeats < 1:
        raise ValueError(f"repeats={repeats} is invalid; allowed: an integer >= 1")
    dev = torch.device(device)
    if (why := link_pairs(dev.type)) is not None:
        raise LinkUnmeasured(why)
    key = {
        "device": cache.device_name(dev),
        "device_type": dev.type,
        "torch": torch.__version__,
        "backend": "nccl" if dev.type == "cuda" else "gloo",
        "sizes": sizes,
        "repeats": repeats,
        "warmup": warmup,
        "calls": True,  # the record holds the isend/irecv call costs
        "wake": list(WAKE_BLOCKED_S),  # and the wake-up of a blocked receiver
    }
    if use_cache and (stored := cache.load("link", key)) is not None:
        try:
            pts = [(int(n), float(t)) for n, t in stored["points"]]
            link = Link(
                float(stored["latency_s"]),
                float(stored["bandwidth_Bps"]),
                send_call_s=float(stored["send_call_s"]),
                recv_call_s=float(stored["recv_call_s"]),
                wake=tuple((float(b), float(w)) for b, w in stored["wake"]),
            )
            return LinkProfile(link, pts, "cache")
        except (KeyError, TypeError, ValueError):
            pass  # corrupt content: measure again
    from ...engine.launch import launch

    res = launch(_ping_pong, 2, (sizes, repeats, warmup, dev.type, timeout_s), threads=1)
    points = [(int(n), float(t)) for n, t in res[0][0]]
    fit = fit_link(points)
    link = Link(
        fit.latency_s,
        fit.bandwidth_Bps,
        send_call_s=float(res[0][1]),
        recv_call_s=float(res[1][1]),
        wake=tuple((float(b), float(w)) for b, w in res[1][2]),
    )
    if use_cache:
        cache.save(
            "link",
            key,
            {
                "latency_s": link.latency_s,
                "bandwidth_Bps": link.bandwidth_Bps,
                "points": points,
                "send_call_s": link.send_call_s,
                "recv_call_s": link.recv_call_s,
                "wake": [list(p) for p in link.wake],
            },
        )
    return LinkProfile(link, points)
