"""How much dearer is a recompute than the forward it repeats, inside the engine's stream? A diagnostic.

    python bench/recompute_excess.py [--trials 6]

The profiler (``sim/measured/profile.py``, ``check_recompute``) refuses a profile whose recompute costs
more than the cell's forward plus the recompute's overhead, beyond the noise: a recompute is the same
forward. Inside the stream it is not quite the same call: the kept forward of micro-batch m runs right
after the forward of m-1 (its code and weights warm), the recompute of m right after the backward of
m+1. This prints, for a cell of four small linear layers (width 256, one thread, as a rank runs) at
three (micro-batch, M) pairs, the medians of each trial and the recompute's excess over forward +
overhead, in total and per layer: the per-layer allowance ``RECOMPUTE_EXCESS_PER_LAYER_S`` is read
from its largest value. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch import nn

from gpipe_repro.sim.measured.profile import RECOMPUTE_EXCESS_PER_LAYER_S
from gpipe_repro.sim.measured.stream import fresh_input, time_stream

WIDTH = 256
CASES = ((1, 32), (8, 4), (32, 1))  # (micro-batch, M)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(3)]
    layers.append(nn.Linear(WIDTH, 10))
    print("micro-batch | M | forward ms | recompute ms | overhead ms | excess us | per layer us")
    worst = 0.0
    for n, M in CASES:
        for _ in range(args.trials):
            g = torch.Generator().manual_seed(n)
            xs = [fresh_input(torch.randn(n, WIDTH, generator=g), False) for _ in range(M)]
            ys = [torch.randint(0, 10, (n,), generator=g) for _ in range(M)]
            t = time_stream(
                layers, xs, ys, F.cross_entropy, device=torch.device("cpu"), warmup=1, repeats=5
            )
            f, r = (statistics.median(t.actions(k)) for k in ("forward", "recompute"))
            o = statistics.median(t.overheads())
            excess = r - f - o
            worst = max(worst, excess / len(layers))
            print(
                f"{n} | {M} | {f * 1e3:.3f} | {r * 1e3:.3f} | {o * 1e3:.3f} | {excess * 1e6:+.1f} "
                f"| {excess / len(layers) * 1e6:+.1f}"
            )
    print(
        f"largest excess per layer: {worst * 1e6:.1f} us; the profiler allows "
        f"{RECOMPUTE_EXCESS_PER_LAYER_S * 1e6:.0f} us per layer above the noise"
    )


if __name__ == "__main__":
    main()
