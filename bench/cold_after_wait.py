"""Does a rank compute slower right after it was blocked? Warm against cold caches on this host, a diagnostic.

    python bench/cold_after_wait.py [--models amoebanet transformer imbalanced] [--n 8]
                                    [--idle 0 0.001 0.005 0.02 0.05] [--repeats 40] [--json out.json]

A pipeline rank alternates computing and waiting: blocked in a receive, its thread sleeps, its
(virtual) core idles or runs something else, and the caches it had filled cool down. The profile
times each layer inside a stream of back-to-back calls, warm; the engine often calls it right after a
wait. For each model this times a forward and backward of its first half of layers (a K = 2 stage)
at micro-batch ``--n``, called back to back (``idle`` 0) and called after the thread slept ``idle``
seconds (``time.sleep``, which gives the core up as a blocked receive does), the idle times
interleaved in a shuffled order, ``--repeats`` times each. It prints per idle time the median call
and its excess over back to back. Nothing here is used by the simulator unless the excess is real:
then ``sim.measured.link`` adds it to the wake-up of a blocked receiver. Run it on an idle machine,
under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.measure.models import model


def _call(layers: list[torch.nn.Module], x: object, y: torch.Tensor, loss: object) -> float:
    t0 = time.perf_counter()
    h = x
    for layer in layers:
        h = layer(h)
    out = h[0] if isinstance(h, tuple) else h
    out.float().mean().backward()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["amoebanet", "transformer", "imbalanced"])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--idle", nargs="+", type=float, default=[0.0, 0.001, 0.005, 0.02, 0.05])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    apply_host_memory("retain")
    rng = random.Random(0)
    out = []
    for name in a.models:
        vm = model(name)
        every = vm.layers()
        stage = every[: max(1, len(every) // 2)]
        x, y = vm.sample(a.n)
        for _ in range(5):  # warm-up
            _call(stage, x, y, vm.loss)
        order = [i for i in a.idle for _ in range(a.repeats)]
        rng.shuffle(order)
        got: dict[float, list[float]] = {i: [] for i in a.idle}
        for idle in order:
            if idle > 0:
                time.sleep(idle)
            else:
                _call(stage, x, y, vm.loss)  # back to back: warm
            got[idle].append(_call(stage, x, y, vm.loss))
        warm = statistics.median(got[0.0]) if 0.0 in got else None
        for idle in a.idle:
            med = statistics.median(got[idle])
            excess = med - warm if warm is not None else float("nan")
            out.append(
                {"model": name, "n": a.n, "idle_s": idle, "median_s": med, "excess_s": excess}
            )
            print(
                f"{name} n={a.n} idle {idle * 1e3:5.1f} ms: call {med * 1e3:7.2f} ms, "
                f"excess over back to back {excess * 1e6:+8.0f} us ({excess / (warm or 1):+.1%})"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
