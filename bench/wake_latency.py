"""How long does a message take to reach a rank that has been blocked in a receive? A diagnostic.

    python bench/wake_latency.py [--repeats 30] [--port 29571]

The simulator's link latency comes from a gloo ping-pong (``sim/measured/link.py``), in which each rank
waits only a round trip for the next message. In a pipeline a rank often waits milliseconds for
its neighbour; on a virtual machine its idle core may then be halted by the hypervisor, and waking
it costs more than a ping-pong shows. Two ranks: rank 0 computes for ``idle`` ms (a spin, like a
stage computing) then sends a float64 timestamp (``time.perf_counter``: one monotonic clock for
every process of a host); rank 1, blocked in ``recv`` since a barrier, prints the median of
(arrival - timestamp) per ``idle``. Nothing here is used by the simulator: the numbers say how
much of the emulated cells' error in ``reports/sim/sim.md`` a latency measured this way would
explain. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

IDLE_MS = (0.0, 1.0, 3.0, 10.0, 30.0)


def _rank(rank: int, repeats: int, port: int, q: Any) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    buf = torch.zeros(128, dtype=torch.float64)  # a timestamp needs float64
    out = {}
    for idle in IDLE_MS:
        lat = []
        for _ in range(repeats):
            dist.barrier()
            if rank == 0:
                end = time.perf_counter() + idle / 1e3
                while time.perf_counter() < end:
                    pass
                buf[0] = time.perf_counter()
                dist.send(buf, 1)
            else:
                dist.recv(buf, 0)
                lat.append(time.perf_counter() - float(buf[0]))
        if rank == 1:
            out[idle] = statistics.median(lat)
    if rank == 1:
        q.put(out)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--port", type=int, default=29571)
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error(f"--repeats={a.repeats} is invalid; allowed: an integer >= 1")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_rank, args=(r, a.repeats, a.port, q)) for r in range(2)]
    for p in ps:
        p.start()
    try:
        res = q.get(timeout=300)
    finally:
        for p in ps:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for idle, s in res.items():
        print(f"receiver blocked ~{idle:4.0f} ms: one-way latency {s * 1e6:6.0f} us (median)")


if __name__ == "__main__":
    main()
