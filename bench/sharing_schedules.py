"""Does a message cost ranks sharing the cores the same under every schedule? A diagnostic.

    python bench/sharing_schedules.py [--calibration reports/sim/calibration.json] [--rounds 5]
                                      [--json out.json] [--from earlier.json]

The simulator charges every receive of ranks that fill this host's cores one constant,
``shared_message_s``, fitted on gpipe alone (``sim/measured/sharing.py``: K = 2 steps of stages
spinning a known time per action). Interleaved 1F1B at K = 2, v = 2 posts three times 1F1B's
messages (issue #39: under the rule before, which charged the sends and receives posted while the
other ranks computed, its real cells simulated long where the charge was large). This runs the same spinning steps under
gpipe and 1f1b (each in a plain and in a ring launch, as interleaved needs) and interleaved (v = 2,
each of a rank's two cells spinning half the time, so that every schedule does the same work),
at M = 2, 8, 32, ``--rounds`` launches of fresh ranks each, and simulates each on the link and
overheads of a committed calibration with its ``shared_message_s``, with none, and with the cost
fitted on that schedule alone (``sharing.fit_shared``). If one charge per message fitted every
schedule, the fitted costs would agree and the committed one would leave each schedule the same
error. ``--from`` fits and simulates the steps an earlier ``--json`` stored, measuring nothing: the
same measurements under another checkout's simulator. Nothing here is used by the simulator. Run it on an idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from gpipe_repro.engine import Pipeline, init_topology
from gpipe_repro.engine.launch import launch
from gpipe_repro.engine.pipeline import DEFAULT_LOOKAHEAD
from gpipe_repro.sim.costs import Link, StageCost
from gpipe_repro.sim.measured.sharing import Spin, fit_shared
from gpipe_repro.sim.simulate import simulate

# (schedule, virtual stages, ring launch)
RUNS = (
    ("gpipe", 1, False),
    ("1f1b", 1, False),
    ("gpipe", 1, True),
    ("1f1b", 1, True),
    ("interleaved", 2, True),
)
MS = (2, 8, 32)
WORK_S = 1e-3  # a rank's spin per micro-batch, forward and backward each, whatever v
SHAPE = (4, 256)  # floats per micro-batch's message: 4 KiB
WARMUP, STEPS = 2, 8


def _loss(y: torch.Tensor, t: Any) -> torch.Tensor:
    return y.mean()


def _rank(ring: bool) -> dict[str, list[float]]:
    """One rank: per run of ``RUNS`` in this launch's kind and M, its timed steps' seconds."""
    topo = init_topology(2, timeout_s=120.0, ring=ring)
    torch.set_num_threads(1)
    out: dict[str, list[float]] = {}
    for schedule, v, r in RUNS:
        if r != ring:
            continue
        for M in MS:
            if v > 1:
                layers: Any = [[Spin(WORK_S / v, WORK_S / v)] for _ in range(v)]
                first: Any = [c * 2 + topo.stage for c in range(v)]
            else:
                layers, first = [Spin(WORK_S, WORK_S)], topo.stage
            pipe = Pipeline(
                layers, topo, M=M, schedule=schedule, loss_fn=_loss, checkpoint="never",
                virtual_stages=v, first_layer=first,
            )  # fmt: skip
            x = torch.ones(M * SHAPE[0], SHAPE[1])
            times = []
            for s in range(WARMUP + STEPS):
                t0 = time.perf_counter()
                pipe.train_step(x if topo.is_first else None, None)
                if s >= WARMUP:
                    times.append(time.perf_counter() - t0)
                for p in pipe.parameters():
                    p.grad = None
            out[_key(schedule, v, ring, M)] = times
    return out


def _key(schedule: str, v: int, ring: bool, M: int) -> str:
    return f"{schedule} v={v} {'ring' if ring else 'plain'} M={M}"


def _simulated(
    dev: dict[str, Any], link: Link, schedule: str, v: int, M: int, cost: float
) -> float:
    nbytes = SHAPE[0] * SHAPE[1] * 4
    n = 2 * v
    stages = [
        StageCost(WORK_S / v, WORK_S / v, WORK_S / v, nbytes if s < n - 1 else 0) for s in range(n)
    ]
    return simulate(
        2, M, schedule, "never", stages, replace(link, shared_s=cost, cores=2), dev["overhead_s"],
        sender_busy=False, step_overhead_s=dev["step_overhead_s"], lookahead=DEFAULT_LOOKAHEAD,
        virtual_stages=v,
    ).step_s  # fmt: skip


def _per_M(dev: dict[str, Any], link: Link, schedule: str, v: int, cost: float) -> list[float]:
    return [_simulated(dev, link, schedule, v, M, cost) for M in MS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=Path("reports/sim/calibration.json"))
    ap.add_argument("--rounds", type=int, default=5, help="launches of fresh ranks per kind")
    ap.add_argument("--json", default=None)
    ap.add_argument("--from", dest="stored", type=Path, default=None, help="an earlier --json")
    a = ap.parse_args(argv)
    try:
        dev = json.loads(a.calibration.read_text())["device"]
        link = Link(**{**dev["link"], "wake": tuple(tuple(p) for p in dev["link"].get("wake", ()))})
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"sharing_schedules: error: --calibration {a.calibration}: {e}", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print(f"sharing_schedules: error: --rounds={a.rounds}; allowed: >= 1", file=sys.stderr)
        return 2
    committed = float(dev["shared_message_s"])
    rule = json.loads(a.calibration.read_text()).get("sharing") or "every message"
    steps: dict[str, list[float]] = {}  # per run and M: each round's median step (slower rank)
    if a.stored is not None:
        wanted = [_key(s, v, r, M) for s, v, r in RUNS for M in MS]
        try:
            rows = json.loads(a.stored.read_text())
            steps = {
                _key(r["schedule"], r["virtual_stages"], r["ring"], r["M"]): r["rounds_s"]
                for r in rows
            }
            missing = [k for k in wanted if k not in steps]
        except (OSError, ValueError, KeyError, TypeError) as e:
            missing = [str(e)]
        if missing:
            print(
                f"sharing_schedules: error: --from {a.stored}: lacks {missing[0]}; allowed: "
                "the --json of an earlier run",
                file=sys.stderr,
            )
            return 2
    for _ in range(0 if a.stored is not None else a.rounds):
        for ring in (False, True):
            per_rank = launch(_rank, 2, (ring,), threads=1)
            for key, t0 in per_rank[0].items():
                steps.setdefault(key, []).append(
                    statistics.median(max(p, q) for p, q in zip(t0, per_rank[1][key]))
                )
    print(
        f"committed shared_message_s: {committed * 1e6:.0f} us ({a.calibration}; fitted under the "
        f"rule {rule!r}, simulated here under this checkout's)"
    )
    print(
        "run | fitted us/message | M | measured ms | simulated: none | committed (error) | fitted"
    )
    out = []
    for schedule, v, ring in RUNS:
        measured = [statistics.median(steps[_key(schedule, v, ring, M)]) for M in MS]
        cost, fixed = fit_shared(measured, partial(_per_M, dev, link, schedule, v))
        for M, m in zip(MS, measured):
            none, com, fit = (
                _simulated(dev, link, schedule, v, M, c) for c in (0.0, committed, cost)
            )
            print(
                f"{schedule} v={v} {'ring' if ring else 'plain'} | {cost * 1e6:.0f} | {M} | "
                f"{m * 1e3:.2f} | {none * 1e3:.2f} | {com * 1e3:.2f} ({com / m - 1:+.1%}) | "
                f"{fit * 1e3:.2f}"
            )
            out.append(
                {"schedule": schedule, "virtual_stages": v, "ring": ring, "M": M, "measured_s": m,
                 "rounds_s": steps[_key(schedule, v, ring, M)], "simulated_none_s": none,
                 "simulated_committed_s": com, "fitted_shared_s": cost, "fitted_fixed_s": fixed,
                 "simulated_fitted_s": fit}
            )  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
