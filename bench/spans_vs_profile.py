"""Where does each schedule's step go against the per-layer profile? K = 2 spans per action kind, a diagnostic.

    python bench/spans_vs_profile.py [--models amoebanet transformer imbalanced] [--M 8]
                                     [--schedules gpipe 1f1b zb-h1 interleaved] [--rounds 3]
                                     [--steps 6] [--json out.json]

``reports/sim/sim.md`` (error by schedule) finds the real zb-h1 cells simulated short while gpipe's
and 1f1b's are not. The simulator builds a stage's step from each layer's profiled costs: forward,
whole backward, and under zb-h1 B and W timed apart (``sim.measured.split``). This runs each model at
K = 2 on the real engine (the validation's partition, remat never, M micro-batches), under each
schedule, and sums per stage the spans of each action kind (a receive is never inside one),
against the profile's charge for the same layers:

- forward: M x the layers' forward;
- backward (gpipe, 1f1b): M x the whole backward;
- zb-h1: B against M x B and W against M x W. The model's first cell has no B: its B only takes the
  gradient (no span), and its W runs the whole split backward, M x (B + W).
- interleaved (v = 2: the rank holds two model cells of the K·v cells cut by cost, ``chunk_slices``):
  forward and backward against M x the layers of both its cells. A launch that runs it is a ring
  (``measure.ranks``), and so are the other schedules' cells in that launch.

A ratio above 1 is time the engine's spans take that the profile does not charge. *Other* is the rest
of the stage's step (waits, sends, bookkeeping), in ms. Both sides are put on the speed probe's
reference speed (``sim.measured.speed``: the profile as the validation takes it, each step by the
probe taken before it), so the host's drift between profiling and running is taken out; the profile
is taken just before the runs (one thread, the engine's host-memory setting). Nothing here is used
by the simulator. Run it on an idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import torch

from gpipe_repro.engine import balance_by_cost, launch, stage_slice
from gpipe_repro.engine.cell import chunk_slices
from gpipe_repro.engine.events import COMPUTE
from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.engine.schedule import SCHEDULES
from gpipe_repro.measure.calibration import profile_model
from gpipe_repro.measure.models import MODELS, N
from gpipe_repro.sim.costs import LayerCost
from gpipe_repro.sim.measured.speed import normalized, reference_s

K = 2
V = 2  # interleaved's model cells per rank
KINDS = ("forward", "backward", "weight")


def spans(events: Sequence[dict], stage: int) -> dict[str, float]:
    """Seconds per computing action kind on ``stage`` (no receive is taken inside a computing span:
    ``tests/engine/test_events.py``)."""
    out: dict[str, float] = {}
    for e in events:
        if e["stage"] == stage and e["action"] in COMPUTE:
            out[e["action"]] = out.get(e["action"], 0.0) + e["end"] - e["start"]
    return out


def charged(costs: Sequence[LayerCost], M: int, schedule: str, first: bool) -> dict[str, float]:
    """What the profile charges a stage of ``costs`` per step, per action kind (module doc)."""
    fwd = M * sum(c.forward_s for c in costs)
    if schedule != "zb-h1":
        return {"forward": fwd, "backward": M * sum(c.backward_s for c in costs)}
    b = M * sum(c.split[0] for c in costs)
    w = M * sum(c.split[1] for c in costs)
    return {"forward": fwd, "backward": 0.0, "weight": b + w} if first else {
        "forward": fwd, "backward": b, "weight": w
    }  # fmt: skip


def _cell(schedule: str, M: int, cut: list[int]) -> dict[str, Any]:
    """A cell of the validation's grid (remat never); interleaved with its own balance of K·v cells."""
    cell: dict[str, Any] = {"M": M, "schedule": schedule, "checkpoint": "never"}
    return cell | ({"virtual_stages": V, "balance": cut} if schedule == "interleaved" else {})


def _rank(name: str, balance: list[int], cells: list[dict], steps: int) -> list[dict[str, Any]]:
    """One rank of the validation's real cells (``measure.ranks.real_rank``, 2 warm-up and
    ``steps`` timed steps) keeping every timed step's events, not only the last one's; per cell
    and timed step the spans per kind (``spans``) and the step, raw seconds."""
    from gpipe_repro.measure import ranks

    out = []
    for res in ranks.real_rank(name, K, balance, cells, 2, steps, every_step=True):
        rows = [
            {**spans([e for e in res["events"] if e["step"] == 2 + i], res["stage"]), "step": t}
            for i, t in enumerate(res["times"])
        ]
        out.append(
            {
                "schedule": res["cell"]["schedule"],
                "stage": res["stage"],
                "rows": rows,
                "probes": res["probes"],  # the first rank's, before each step (0 elsewhere)
            }
        )
    return out


def measure(
    name: str, M: int, schedules: Sequence[str], rounds: int, steps: int
) -> list[dict[str, Any]]:
    """Per schedule and stage: the median over ``rounds`` x ``steps`` steps of the spans per kind
    and of the step, beside the profile's charge (taken just before)."""
    n = N // M
    ref = reference_s()
    profile = profile_model(name, sorted({n, N}), repeats=5, seed=0, ref=ref)
    whole = [c.forward_s + c.backward_s for c in profile.costs[N]]
    balance, cut = balance_by_cost(whole, K), balance_by_cost(whole, K * V)
    got: dict[tuple[str, int], list[dict[str, float]]] = {}
    for r in range(rounds):  # the schedules' order turned each round
        order = list(schedules[r % len(schedules) :]) + list(schedules[: r % len(schedules)])
        cells = [_cell(s, M, cut) for s in order]
        for per_cell in zip(*launch(_rank, K, (name, balance, cells, steps), threads=1)):
            probes = next(r["probes"] for r in per_cell if r["stage"] == 0)
            for res in per_cell:  # every rank's step on the first rank's probe before it
                got.setdefault((res["schedule"], res["stage"]), []).extend(
                    {k: normalized(v, p, ref) for k, v in row.items()}
                    for row, p in zip(res["rows"], probes)
                )
    out = []
    for (schedule, stage), rows in got.items():
        slices = (
            chunk_slices(cut, K, stage)
            if schedule == "interleaved"
            else [stage_slice(balance, stage)]
        )
        costs = [c for sl in slices for c in profile.costs[n][sl]]
        med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in (*KINDS, "step")}
        out.append(
            {
                "model": name, "M": M, "micro_batch": n, "schedule": schedule,
                "balance": cut if schedule == "interleaved" else balance,
                "stage": stage, "steps": len(rows), "measured": med,
                "profile": charged(costs, M, schedule, first=stage == 0),
            }
        )  # fmt: skip
    return out


def line(r: dict[str, Any]) -> str:
    m, p = r["measured"], r["profile"]
    ratios = " | ".join(
        f"{m[k] / p[k]:.3f}" if p.get(k) else ("   -  " if not m.get(k) else f"{m[k] * 1e3:.1f} ms")
        for k in KINDS
    )
    other = m["step"] - sum(m[k] for k in KINDS)
    return (
        f"{r['model']} {r['schedule']:11s} stage {r['stage']} | {ratios} | "
        f"{m['step'] * 1e3:.1f} | {other * 1e3:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["amoebanet", "transformer", "imbalanced"])
    ap.add_argument("--M", type=int, default=8, help="micro-batches per step (divides the batch)")
    ap.add_argument("--schedules", nargs="+", default=["gpipe", "1f1b", "zb-h1", "interleaved"])
    ap.add_argument("--rounds", type=int, default=3, help="launches of fresh ranks")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per launch")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    bad = (
        [f"--models {m!r} is unknown; allowed: {', '.join(MODELS)}" for m in a.models if m not in MODELS]
        + [
            f"--schedules {s!r} is unknown; allowed: {', '.join(SCHEDULES)}"
            for s in a.schedules
            if s not in SCHEDULES
        ]
        + ([f"--M={a.M} is invalid; allowed: a divisor of the batch {N}"] if a.M < 1 or N % a.M else [])
        + ([f"--M={a.M} is invalid with interleaved; allowed: a multiple of K = {K}"]
           if "interleaved" in a.schedules and a.M % K else [])
        + ([f"--rounds={a.rounds} is invalid; allowed: >= 1"] if a.rounds < 1 else [])
        + ([f"--steps={a.steps} is invalid; allowed: >= 1"] if a.steps < 1 else [])
    )  # fmt: skip
    if bad:
        print(f"spans_vs_profile: error: {bad[0]}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # as a rank runs: one thread, freed memory kept mapped
    apply_host_memory("retain")
    print(
        "model schedule stage | forward span/profile | backward (B) span/profile | "
        "W span/profile | step ms | other ms"
    )
    out: list[dict[str, Any]] = []
    for name in a.models:
        rows = measure(name, a.M, a.schedules, a.rounds, a.steps)
        for r in sorted(rows, key=lambda r: (a.schedules.index(r["schedule"]), r["stage"])):
            print(line(r), flush=True)
        out += rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
