"""Do two ranks on this host slow each other down? A diagnostic for the simulator's validation.

    python bench/contention.py [--iters 20000]

The simulator takes each layer's cost as profiled in one process on an otherwise idle host. Two
things could make a K = 2 step on the same host slower than that:

1. *both ranks computing at once*: the same single-threaded matmul loop timed alone, then in two
   processes started together (the slower of the two, best of 3 rounds);
2. *a rank waiting for its neighbour*: the loop on rank 0 while rank 1 is blocked in a gloo
   ``recv`` (and the CPU time rank 1 spends in that wait).

It prints one line per measurement. Nothing here is used by the simulator; the numbers explain
(or rule out) a bias in ``reports/sim/``. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import torch
import torch.distributed as dist


def _loop(iters: int) -> float:
    a = torch.randn(256, 256)
    x = torch.randn(64, 256)
    for _ in range(20):  # warm-up
        x = torch.relu(x @ a) * 0.01
    t0 = time.perf_counter()
    for _ in range(iters):
        x = torch.relu(x @ a) * 0.01 + 0.1
    return time.perf_counter() - t0


def _timed(iters: int, q: Any) -> None:
    torch.set_num_threads(1)
    q.put(_loop(iters))


def _pair(rank: int, iters: int, port: int, q: Any) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    buf = torch.zeros(16)
    for _ in range(3):
        dist.barrier()
        if rank == 0:
            dt = _loop(iters)
            dist.send(buf, 1)
            q.put(("compute", dt))
        else:
            t0 = time.process_time()
            dist.recv(buf, 0)
            q.put(("wait_cpu", time.process_time() - t0))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000, help="matmul iterations per timing")
    ap.add_argument("--port", type=int, default=29533)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    alone = min(_loop(a.iters) for _ in range(3))
    both = []
    for _ in range(3):
        q = ctx.Queue()
        ps = [ctx.Process(target=_timed, args=(a.iters, q)) for _ in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(timeout=600)
        both.append(max(q.get(timeout=10), q.get(timeout=10)))
    print(f"one process alone: {alone:.3f} s")
    print(f"two processes at once: {min(both):.3f} s each (slowdown {min(both) / alone:.3f})")
    q = ctx.Queue()
    ps = [ctx.Process(target=_pair, args=(r, a.iters, a.port, q)) for r in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(timeout=600)
    got: dict[str, list[float]] = {"compute": [], "wait_cpu": []}
    for _ in range(6):
        k, v = q.get(timeout=10)
        got[k].append(v)
    c = min(got["compute"])
    print(
        f"rank 0 computing while rank 1 waits in a gloo recv: {c:.3f} s (x{c / alone:.3f}); "
        f"rank 1's CPU time in that wait: {max(got['wait_cpu']):.3f} s"
    )


if __name__ == "__main__":
    main()
