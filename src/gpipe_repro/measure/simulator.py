"""``make validate-sim``: measure cells on this machine, simulate them on the calibrated costs, compare.

1. **Calibrate** (``calibration.calibrate``; nothing is fitted to the cells validated), then profile
   every validation model's layers at each micro-batch the grid uses (``sim.measured.profile_layers``:
   median of repeats, one thread, the engine's host-memory setting, each run put on the speed probe's
   reference speed).
2. **Real cells**: ``real_K`` x ``Ms`` x schedules x remat, each model, ``rounds`` rounds of fresh
   processes in a shuffled order (``ranks.real_rank``). The held-out models (``models.HELD_OUT``:
   families no calibration step runs) take ``held_out_Ms`` and are reported apart; the schedules
   since GPipe (``later``: interleaved, zb-h1) at K >= 2 in launches of their own (a cell's v: its
   balance's cells over K).
3. **Emulated cells**: ``emulated_K``, the same grid, the engine with every layer sleeping its
   profiled cost times the dilation (``calibration``: why it grows with the ranks per core), the
   emulated call's CPU calibrated on a model that is not emulated.
4. **Simulate** every cell with the same partition: one ``CellRow`` per cell (``validation.csv``:
   measured median, simulated, relative error, the spread of the measured steps, how far the rounds'
   medians lie apart — the machine's repeatability, a floor for any model). A real cell's steps in a
   round are put on the reference speed by the median of the probes taken before them; the same
   comparison without the probes is kept beside (``*_raw_*``). Plus the events of the traced cells'
   last step (``events.jsonl``: ``TRACE_CELL`` and the worst real and emulated cells).

Then this CPU's roofline against the profiled layers (``roofline_check``; ``cpu.yaml``) and the
calibration (``calibration.json``). The figures are in ``reports/sim/sim.md``.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..engine import launch
from ..engine.hostmem import apply_host_memory
from ..sim.measured import DeviceModel, LayerProfile
from ..sim.measured.cpu import cpu_roofline
from ..sim.measured.speed import normalized
from . import ranks
from .calibration import (
    VARIANTS,
    Calibration,
    as_emulated,
    calibrate,
    dilated,
    partition,
    simulate_cell,
)
from .calibration import Settings as Calibrated
from .models import MODELS, N, calibration_model, held_out
from .roofline_check import RooflineRow, validation_rows, write_profile

# The cell drawn measured-above-simulated in the report (remat: the recompute runs before the gradient).
TRACE_CELL = {
    "model": "transformer",
    "K": 2,
    "M": 8,
    "schedule": "gpipe",
    "checkpoint": "always",
    "kind": "real",
}
KEY = ("model", "K", "M", "schedule", "checkpoint", "kind")


@dataclass
class CellRow:
    """One cell of ``validation.csv``: measured against simulated (``simulated_<variant>_s``: the
    same cell with one modelling choice of ``VARIANTS`` undone)."""

    model: str
    K: int
    M: int
    schedule: str
    checkpoint: str
    kind: str  # real | emulated
    balance: str
    micro_batch: int
    measured_step_s: float
    simulated_step_s: float
    rel_error: float
    measured_raw_step_s: float | None = None
    simulated_raw_step_s: float | None = None
    rel_error_raw: float | None = None
    speed: float | None = None  # the machine's speed during the cell relative to the reference
    round_spread: float | None = None
    round_spread_raw: float | None = None
    measured_iqr_s: float | None = None
    steps_timed: int | None = None
    core_wait_share: float | None = None
    measured_bubble: float | None = None
    simulated_bubble: float | None = None
    simulated_sender_busy_s: float | None = None
    simulated_posted_s: float | None = None
    simulated_no_calls_s: float | None = None
    simulated_no_sharing_s: float | None = None
    simulated_no_overhead_s: float | None = None
    dilation: float | None = None  # emulated cells: the layers slept this many times their cost


@dataclass
class Settings(Calibrated):
    """The grid of ``make validate-sim`` (``quick``: a smoke run of every step)."""

    models: list[str] = field(default_factory=lambda: list(MODELS))
    real_K: list[int] = field(default_factory=lambda: [1, 2])
    emulated_K: list[int] = field(default_factory=lambda: [4, 8])
    emulated_models: list[str] = field(default_factory=lambda: ["amoebanet", "transformer"])
    Ms: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 32])
    schedules: list[str] = field(default_factory=lambda: ["gpipe", "1f1b"])
    # the schedules since GPipe (#39): (schedule, model cells per rank), at K >= 2 (real at K = 2,
    # emulated at K = 4, 8), in launches of their own (a ring of stages where v > 1)
    later: list[tuple[str, int]] = field(default_factory=lambda: [("interleaved", 2), ("zb-h1", 1)])
    checkpoints: list[str] = field(default_factory=lambda: ["never", "always"])
    held_out_Ms: list[int] = field(default_factory=lambda: [1, 2, 4, 8])  # the held-out models' M
    rounds: int = 3
    emulated_rounds: int = 2
    steps: int = 4
    repeats: int = 7
    profile_passes: int = 3
    emulated_steps: int = 3

    @classmethod
    def quick(cls) -> Settings:
        """A smoke run of every step (a few minutes): fewer cells, one round, two timed steps."""
        return cls(
            models=["transformer", "imbalanced", "mlp"], emulated_models=["transformer"],
            Ms=[1, 8, 32],  # M = 8: the traced cell (TRACE_CELL)
            held_out_Ms=[1, 8],
            rounds=1, emulated_rounds=1, warmup=1, steps=2, repeats=3, emulated_K=[4],
            profile_passes=1,
        )  # fmt: skip

    def call_model(self) -> str | None:
        """The model the emulated call is calibrated on: a calibration model not emulated (nothing
        about the emulated cells is fitted, nothing about the held-out ones either), else the first
        emulated one; None where nothing is emulated."""
        if not (self.emulated_models and self.emulated_K):
            return None
        fit = [m for m in self.models if not held_out(m)]
        return calibration_model(
            next((m for m in fit if m not in self.emulated_models), self.emulated_models[0])
        )

    def cells(self, model: str, grid: list[dict]) -> list[dict]:
        """The cells of ``grid`` that ``model`` runs: a held-out model its ``held_out_Ms`` alone."""
        return [c for c in grid if not held_out(model) or c["M"] in self.held_out_Ms]


def _grid(s: Settings) -> list[dict]:
    return [
        {"M": M, "schedule": sc, "checkpoint": ck}
        for M in s.Ms
        for sc in s.schedules
        for ck in s.checkpoints
    ]


def _later_grid(s: Settings, K: int, profile: LayerProfile) -> list[dict]:
    """The later schedules' cells at K: M a multiple of K where v > 1 (and K·v cells at most the
    layers), each with its own partition of K·v cells."""
    layers = len(profile.costs[max(profile.sizes)])
    return [
        {"M": M, "schedule": sc, "checkpoint": ck, "virtual_stages": v}
        | ({"balance": partition(profile, K * v)} if v > 1 else {})
        for sc, v in s.later
        for M in s.Ms
        for ck in s.checkpoints
        if K >= 2 and (v == 1 or (M % K == 0 and K * v <= layers))
    ]


def _bubble(events: list[dict], K: int) -> float | None:
    from ..engine.events import Event, measured_bubble

    evs = [Event(**e) for e in events if e["action"] != "step"]
    return measured_bubble(evs, K)[1] if evs else None


def _rounds(
    kind: str,
    model: str,
    K: int,
    balance: list[int],
    grid: list[dict],
    rounds: int,
    s: Settings,
    fn: Callable[..., Any],
    extra: tuple,
    log: Callable[[str], None],
) -> list[tuple[dict[str, Any], list[ranks.CellTimes]]]:
    """Every cell of ``grid`` in ``rounds`` launches of fresh processes, each in its own order; per
    cell, its ``CellTimes`` of every round."""
    rng = random.Random(f"{s.seed}-{kind}-{model}-{K}")
    got: dict[str, list[ranks.CellTimes]] = {}
    for r in range(rounds):
        order = grid[:]
        rng.shuffle(order)
        t0 = time.perf_counter()
        per_rank = launch(fn, K, (model, K, balance, order, *extra, s.warmup, s.steps), threads=1)
        for ct in ranks.step_times(per_rank):
            got.setdefault(json.dumps(ct.cell, sort_keys=True), []).append(ct)
        log(
            f"{kind} {model} K={K} round {r + 1}/{rounds}: {len(grid)} cells in {time.perf_counter() - t0:.1f} s"
        )
    return [(json.loads(k), v) for k, v in got.items()]


def _spread(per_round: list[list[float]]) -> float | None:
    """How far the rounds' medians lie from the median of all steps (the largest, relative): what
    the same cell measured again differs by on this machine. None for a single round."""
    if len(per_round) < 2:
        return None
    med = statistics.median(t for ts in per_round for t in ts)
    return max(abs(statistics.median(ts) - med) / med for ts in per_round)


def worst(rows: Sequence[CellRow], kind: str) -> dict[str, Any] | None:
    """The key of the ``kind`` cell with the largest error."""
    rs = [r for r in rows if r.kind == kind]
    w = max(rs, key=lambda r: abs(r.rel_error)) if rs else None
    return None if w is None else {k: getattr(w, k) for k in KEY}


def traced_cells(rows: Sequence[CellRow]) -> list[dict[str, Any]]:
    """The cells whose traces the report draws: ``TRACE_CELL`` and the worst real and emulated cells."""
    return [dict(TRACE_CELL), *(c for k in ("real", "emulated") if (c := worst(rows, k)))]


def _keep_traced(every: Path, path: Path, rows: list[CellRow]) -> None:
    keep = traced_cells(rows)
    with open(every) as src, open(path, "w") as dst:
        for line in src:
            d = json.loads(line)
            if any(all(d[k] == c[k] for k in KEY) for c in keep):
                dst.write(line)
    every.unlink()


@dataclass
class Validation:
    rows: list[CellRow]
    profiles: dict[str, LayerProfile]
    device: DeviceModel
    calibration: Calibration
    roofline: list[RooflineRow] = field(default_factory=list)


def _row(cell: dict, per_round: list[ranks.CellTimes], ref: float | None) -> dict[str, Any]:
    """A cell's measured figures over its rounds: each round's steps on the reference speed by the
    median of that round's probes where every round was probed (one probe is noisy; the machine's
    phases last seconds, longer than a cell), else as measured."""
    raw_rounds = [ct.times for ct in per_round]
    probed = ref is not None and all(ct.probes for ct in per_round)
    rounds = (
        [[normalized(t, statistics.median(ct.probes), ref) for t in ct.times] for ct in per_round]
        if probed and ref is not None
        else raw_rounds
    )
    ts, raw = [t for r in rounds for t in r], [t for r in raw_rounds for t in r]
    med = statistics.median(ts)
    q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [med, med, med]
    probes = [p for ct in per_round for p in ct.probes]
    return {
        "measured_step_s": med,
        "measured_raw_step_s": statistics.median(raw),
        # the machine's speed during the cell relative to the reference (< 1: slower)
        "speed": ref / statistics.median(probes) if probed and ref is not None else None,
        "round_spread": _spread(rounds),
        "round_spread_raw": _spread(raw_rounds),
        "measured_iqr_s": q[2] - q[0],
        "steps_timed": len(ts),
        "core_wait_share": statistics.median(w for ct in per_round for w in ct.waits),
    }


def validate(out: Path, s: Settings, log: Callable[[str], None] = print) -> Validation:
    """Run everything; write ``events.jsonl`` into ``out`` and return the rows of ``validation.csv``."""
    out.mkdir(parents=True, exist_ok=True)
    apply_host_memory("retain")
    sizes = sorted({N // M for M in s.Ms + s.held_out_Ms})
    emulated_K = s.emulated_K if s.emulated_models else []
    wanted = {
        name: sorted({N // M for M in s.held_out_Ms}) if held_out(name) else sizes
        for name in dict.fromkeys(s.models + s.emulated_models)
    }
    calib, dm, profiles = calibrate(
        s, sizes, sorted(set(s.Ms)), emulated_K, s.call_model(), log, wanted
    )
    ref, overshoot = calib.speed_reference_s, calib.sleep_overshoot_s
    calib.profiles = {k: v.to_json() for k, v in profiles.items()}
    grid = _grid(s)
    rows: list[CellRow] = []
    every = out / "events-all.jsonl.tmp"  # every cell's last step; only the traced cells are kept
    plan = [("real", m, K) for m in s.models for K in s.real_K]
    plan += [("emulated", m, K) for m in s.emulated_models for K in emulated_K]
    with open(every, "w") as ev_file:
        for kind, name, K in plan:
            prof = profiles[name]
            balance = partition(prof, K)
            if kind == "real":
                dilation, slept = None, prof.costs
                measured = [
                    got
                    for g in (
                        s.cells(name, grid),
                        [] if held_out(name) else _later_grid(s, K, prof),
                    )
                    if g
                    for got in _rounds(
                        kind, name, K, balance, g, s.rounds, s, ranks.real_rank, (), log
                    )
                ]
            else:
                dilation = calib.dilation(K)
                slept = dilated(prof.costs, dilation)
                es = replace(s, warmup=s.emulated_warmup, steps=s.emulated_steps)
                extra = (slept,)
                fn = ranks.emulated_rank
                measured = [
                    got
                    for g in (grid, _later_grid(s, K, prof))
                    if g
                    for got in _rounds(
                        kind, name, K, balance, g, s.emulated_rounds, es, fn, extra, log
                    )
                ]
            for cell, per_round in measured:
                n = N // cell["M"]
                call_s = calib.emulation_call_s or 0.0
                lc, extra_s = (
                    (prof.costs[n], 0.0)
                    if kind == "real"
                    else as_emulated(slept[n], overshoot, call_s)
                )
                dk = dm if kind == "real" else calib.emulated_device(dm, K)
                res = simulate_cell(cell, K, balance, lc, dk, extra_s, shared=kind == "real")
                m = _row(cell, per_round, ref)
                sim_raw = (
                    simulate_cell(cell, K, balance, prof.raw[n], dm, shared=True).step_s
                    if m["speed"] is not None and prof.raw is not None
                    else res.step_s
                )
                evs = per_round[-1].events
                # v is the balance's cells over K (no column of its own: the committed CSV's)
                row = {
                    "model": name, "K": K,
                    **{k: x for k, x in cell.items() if k != "virtual_stages"}, "kind": kind,
                    "balance": "-".join(map(str, cell.get("balance", balance))),
                    "micro_batch": n, **m,
                    "simulated_step_s": res.step_s,
                    "rel_error": (res.step_s - m["measured_step_s"]) / m["measured_step_s"],
                    "simulated_raw_step_s": sim_raw,
                    "rel_error_raw": (sim_raw - m["measured_raw_step_s"]) / m["measured_raw_step_s"],
                    "dilation": dilation, "measured_bubble": _bubble(evs, K),
                    "simulated_bubble": res.bubble_fraction,
                }  # fmt: skip
                for v in VARIANTS:
                    if v != "model":
                        row[f"simulated_{v}_s"] = simulate_cell(
                            cell, K, balance, lc, dk, extra_s, v, kind == "real"
                        ).step_s
                rows.append(CellRow(**row))
                key = {k: row[k] for k in KEY}
                sim_events = [e.to_dict() for e in res.events]
                ev_file.write(json.dumps({**key, "measured": evs, "simulated": sim_events}) + "\n")
    _keep_traced(every, out / "events.jsonl", rows)
    return Validation(rows, profiles, dm, calib)


PROFILE_HEADER = (
    "This CPU as a roofline profile, calibrated by `make validate-sim` (sim/measured/cpu.py):\n"
    "peak = the best 1-thread square fp32 matmul (16..1024), efficiency = each matmul's rate / peak\n"
    "by its FLOPs (non-decreasing), memory bandwidth = a 64 MiB copy, op_min_s = one eager operator\n"
    "call, link and overhead = this device's calibration (sim/measured/device.py). Use: "
    "hardware=<path to this file> is not a group option;\n"
    "copy it to conf/hardware/ to simulate on it."
)


def measure(out: Path, quick: bool) -> Validation:
    """Measure into ``out`` (``quick``: ``Settings.quick``, a smoke run of every step): the cells
    (``events.jsonl``), this CPU's profile (``cpu.yaml``) and ``calibration.json``; the rows of
    ``validation.csv`` and ``roofline.csv`` are returned."""
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    v = validate(out, Settings.quick() if quick else Settings(), log=log)
    hw = cpu_roofline(v.device)
    write_profile(hw, out / "cpu.yaml", PROFILE_HEADER)
    v.roofline = validation_rows(v.profiles, hw)
    v.calibration.quick = quick
    v.calibration.finish(t0)
    v.calibration.save(out)
    return v
