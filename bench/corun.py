"""Do two ranks computing at once on this host slow each other's layers? A diagnostic for K = 2 real cells.

    python bench/corun.py [--models amoebanet transformer imbalanced] [--M 4] [--rounds 3]

A K = 2 real cell runs its two ranks on this host's two cores. The profile times each layer in one
process with the other core idle; in a pipeline's steady state both ranks compute at once, sharing
the last-level cache, the memory bandwidth and whatever the hypervisor shares between the two
vCPUs. ``bench/contention.py`` asks that of a fixed matmul loop; this asks it of the validation
models' own training work: a K = 1 engine step of the model (M micro-batches of N = 32 samples),
timed in one process alone, then in two processes started together (each its own copy, released at
once by a barrier), alternating, ``--rounds`` times. Per model it prints the median step alone, the
median of the slower process together, and the ratio (the co-run slowdown); ``--json`` writes them.
Nothing here is used by the simulator. Run it on an otherwise idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import statistics
import time
from typing import Any

import torch


def _steps(name: str, M: int, steps: int, barrier: Any, q: Any) -> None:
    from gpipe_repro.engine import Pipeline, single_process
    from gpipe_repro.engine.hostmem import apply_host_memory
    from gpipe_repro.measure.models import N, model

    torch.set_num_threads(1)
    apply_host_memory("retain")
    vm = model(name)
    x, y = vm.sample(N)
    pipe = Pipeline(copy.deepcopy(vm.layers()), single_process(), M=M, loss_fn=vm.loss)
    opt = torch.optim.RMSprop(pipe.parameters(), lr=1e-5)
    for _ in range(2):  # warm-up, untimed
        pipe.train_step(x, y)
        opt.step()
        opt.zero_grad(set_to_none=False)
    if barrier is not None:
        barrier.wait(timeout=120)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        pipe.train_step(x, y)
        opt.step()
        opt.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - t0)
    q.put(statistics.median(times))


def _run(ctx: Any, name: str, M: int, steps: int, together: bool) -> float:
    q = ctx.Queue()
    n = 2 if together else 1
    barrier = ctx.Barrier(n) if together else None
    ps = [ctx.Process(target=_steps, args=(name, M, steps, barrier, q)) for _ in range(n)]
    for p in ps:
        p.start()
    got = [q.get(timeout=600) for _ in range(n)]
    for p in ps:
        p.join(timeout=60)
    return max(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["amoebanet", "transformer", "imbalanced"])
    ap.add_argument("--M", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = []
    for name in a.models:
        alone, both = [], []
        for _ in range(a.rounds):
            alone.append(_run(ctx, name, a.M, a.steps, False))
            both.append(_run(ctx, name, a.M, a.steps, True))
        al, bo = statistics.median(alone), statistics.median(both)
        out.append({"model": name, "M": a.M, "alone_s": al, "together_s": bo, "slowdown": bo / al})
        print(
            f"{name} M={a.M}: alone {al * 1e3:.1f} ms, two at once {bo * 1e3:.1f} ms "
            f"(slowdown {bo / al:.3f}; rounds alone {[round(t * 1e3, 1) for t in alone]}, "
            f"together {[round(t * 1e3, 1) for t in both]})"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
