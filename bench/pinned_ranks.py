"""Does a K = 2 real cell run faster with each rank held to its own core? A diagnostic for the K = 2 gap.

    python bench/pinned_ranks.py [--models mlp plainconv] [--Ms 1 2 4 8] [--rounds 3] [--steps 6]
                                 [--json out.json]

``reports/sim/sim.md`` finds the K = 2 real cells of short-step models (mlp) simulated 20-30% short,
and their ranks waiting for a core (the *core wait* column: runnable, off the cores) for a far larger
share of the step than any K = 1 cell. The engine leaves the ranks' placement to the kernel: each rank
process has its own threads besides the main one (gloo's), and the scheduler may put a woken rank on a
core that is busy while the other idles, until its load balancing moves it. This runs the validation's
real cells (``measure.ranks.real_rank``: gpipe, remat never, the model's cost-balanced partition at
K = 2) in launches of fresh ranks, alternately free and with rank r held to core r
(``os.sched_setaffinity`` before the process group starts, so gloo's threads inherit it), ``--rounds``
times each, and prints per M the median step (slowest rank) and the median core wait of both.
Nothing here is used by the engine or the simulator. Run it on an idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

from gpipe_repro.engine import balance_by_cost, launch
from gpipe_repro.measure import ranks
from gpipe_repro.measure.calibration import profile_model
from gpipe_repro.measure.models import MODELS, N

K = 2


def _rank(name: str, balance: list[int], cells: list[dict], steps: int, pin: bool) -> list[dict]:
    if pin:
        os.sched_setaffinity(0, {int(os.environ["RANK"]) % (os.cpu_count() or 1)})
    return ranks.real_rank(name, K, balance, cells, 2, steps)


def measure(name: str, Ms: list[int], rounds: int, steps: int) -> list[dict[str, Any]]:
    """Per M: the median step and core wait, free and pinned, over ``rounds`` launches of each."""
    profile = profile_model(name, [N], repeats=3, seed=0, ref=None)
    balance = balance_by_cost([c.forward_s + c.backward_s for c in profile.costs[N]], K)
    cells = [{"M": M, "schedule": "gpipe", "checkpoint": "never"} for M in Ms]
    got: dict[tuple[int, bool], list[tuple[float, float]]] = {}
    for r in range(rounds):  # which goes first alternates
        for pin in (False, True) if r % 2 == 0 else (True, False):
            for ct in ranks.step_times(
                launch(_rank, K, (name, balance, cells, steps, pin), threads=1)
            ):
                got.setdefault((ct.cell["M"], pin), []).extend(zip(ct.times, ct.waits, strict=True))
    out = []
    for M in Ms:
        row: dict[str, Any] = {"model": name, "M": M, "balance": balance}
        for pin, tag in ((False, "free"), (True, "pinned")):
            row[f"{tag}_step_s"] = statistics.median(t for t, _ in got[(M, pin)])
            row[f"{tag}_core_wait"] = statistics.median(w for _, w in got[(M, pin)])
        row["pinned_over_free"] = row["pinned_step_s"] / row["free_step_s"]
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "plainconv"], choices=sorted(MODELS))
    ap.add_argument("--Ms", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--rounds", type=int, default=3, help="launches of each, free and pinned")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per launch")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if (os.cpu_count() or 1) < K:
        raise SystemExit(f"cpu_count={os.cpu_count()} is too few; allowed: at least {K} cores")
    bad = [M for M in a.Ms if M < 1 or N % M]
    if bad:
        raise SystemExit(f"--Ms {bad} is invalid; allowed: divisors of the batch {N}")
    out = []
    for name in a.models:
        for row in measure(name, a.Ms, a.rounds, a.steps):
            out.append(row)
            print(
                f"{name} K={K} M={row['M']}: free {row['free_step_s'] * 1e3:.2f} ms (core wait "
                f"{row['free_core_wait']:.3f}), pinned {row['pinned_step_s'] * 1e3:.2f} ms (core "
                f"wait {row['pinned_core_wait']:.3f}), pinned/free {row['pinned_over_free']:.3f}",
                flush=True,
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
