"""``make validate-sim``: measure cells on this machine, simulate them on the calibrated costs, compare.

1. **Calibrate** (nothing here is fitted to the cells being validated): the speed probe's reference
   (``sim.measured.speed``); every validation model's layers profiled at each micro-batch the sweep uses
   (``sim.measured.profile_layers``: median of repeats, in this process with one thread and the engine's
   host-memory setting, each run put on the reference speed by a probe just before it); this device's link and the
   engine's per-action and per-step overheads from a separate reference model (``sim.measured.device_model``,
   measured afresh, not from the cache); the emulator's sleep overshoot.
2. **Real cells**: K in {1, 2} x M in {1, 2, 4, 8, 32} x both schedules x remat never/always, each
   model, ``rounds`` rounds of fresh processes in a shuffled order (``cells``).
3. **Emulated cells**: K in {4, 8}, same grid, the engine with every layer sleeping its profiled cost
   times a *dilation* (``emulation_dilation``: ``dilation_scale`` times the ranks per core, here
   5 x 8 / 2 = 20 at K = 8). Time dilation: with 8 ranks on 2 cores the engine's own CPU work — the
   Python around each layer call, autograd, gloo's threads — queues for the cores, which 8 devices
   would not, and the emulated step comes out slower than any simulation of 8 devices. Measured on
   the 2-core development VM (Transformer and AmoebaNet, K = 4 and 8, M = 1, 8, 32, gpipe): at one
   fixed dilation of 3 the Transformer's K = 8 cells measured up to 44% slower than simulated, their
   ranks waiting up to 28% of a step for a core; at 10, -7.5% at worst (K = 4: -2.8%); at 40, -2.7%
   at worst (every cell's core wait under 1%). So the dilation grows with the ranks per core, and
   each cell's core wait is reported beside its error. The emulated layer call's own CPU cost is
   calibrated before, on a model that is not emulated (``emulation_call_s``: K = 1 emulated steps
   against their simulation, slope over layer calls).
4. **Simulate** every cell with the same partition: one ``CellRow`` per cell (``validation.csv``:
   measured median, simulated, relative error, the spread of the measured steps, how far the rounds'
   medians lie apart — the machine's repeatability, a floor for any model). A real cell's steps in a
   round are put on the reference speed by the median of the probes taken before them
   (``measured_step_s``); the same comparison
   without the probes (raw steps against the raw profile) is kept beside (``*_raw_*``). Plus the events of
   the traced cells' last step (``events.jsonl``: ``TRACE_CELL`` and the worst real and emulated
   cells) for the report's traces (``text``).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..engine import balance_by_cost, launch
from ..engine.hostmem import apply_host_memory
from ..engine.pipeline import DEFAULT_LOOKAHEAD
from ..sim.costs import LayerCost, stage_costs
from ..sim.measured import DeviceModel, LayerProfile, device_model, profile_layers
from ..sim.measured.cpu import cpu_roofline
from ..sim.measured.profile import OUTSIDE_SPANS
from ..sim.measured.speed import normalized, reference_s
from ..sim.simulate import SimResult, simulate
from . import ranks as C
from .models import MODELS, N, model
from .roofline import RooflineRow, roofline_rows, write_profile

__all__ = [
    "Settings",
    "Validation",
    "validate",
    "simulate_cell",
    "traced_cells",
    "CellRow",
    "VARIANTS",
    "TRACE_CELL",
    "KEY",
    "profile_model",
]

# The calibrated model, and each of its modelling choices undone: the report shows what each one buys.
VARIANTS = {
    "model": "the calibrated model",
    "sender_busy": "a send occupies its sender for the whole transfer",
    "posted": "receives always posted (no gloo rendezvous)",
    "no_calls": "posting sends and receives is free",
    "no_sharing": "a message costs ranks sharing the host's cores nothing beyond posting it",
    "no_overhead": "no engine overhead per action or step",
}

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
class Settings:
    models: list[str] = field(default_factory=lambda: list(MODELS))
    real_K: list[int] = field(default_factory=lambda: [1, 2])
    emulated_K: list[int] = field(default_factory=lambda: [4, 8])
    emulated_models: list[str] = field(default_factory=lambda: ["amoebanet", "transformer"])
    Ms: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 32])
    schedules: list[str] = field(default_factory=lambda: ["gpipe", "1f1b"])
    checkpoints: list[str] = field(default_factory=lambda: ["never", "always"])
    rounds: int = 3
    emulated_rounds: int = 2
    warmup: int = 2
    steps: int = 4
    repeats: int = 7  # profile repeats per layer and size
    seed: int = 0
    normalize: bool = True  # put real cells and the profile on the speed probe's reference speed
    dilation_scale: float = 5.0  # emulated layers sleep this x (ranks per core) x their cost
    emulated_warmup: int = 1
    emulated_steps: int = 3

    @classmethod
    def quick(cls) -> Settings:
        """A smoke run of every step (a few minutes): fewer cells, one round, two timed steps."""
        return cls(
            models=["transformer", "imbalanced"],
            emulated_models=["transformer"],
            Ms=[1, 8, 32],  # M = 8: the traced cell (TRACE_CELL)
            schedules=["gpipe", "1f1b"],
            checkpoints=["never", "always"],
            rounds=1,
            emulated_rounds=1,
            warmup=1,
            steps=2,
            repeats=3,
            emulated_K=[4],
        )


def _grid(s: Settings) -> list[dict]:
    return [
        {"M": M, "schedule": sc, "checkpoint": ck}
        for M in s.Ms
        for sc in s.schedules
        for ck in s.checkpoints
    ]


def _partition(profile: LayerProfile, K: int) -> list[int]:
    """The min-max partition of the profiled forward + backward time at the largest profiled
    micro-batch (N, M = 1, in the full grid); one partition for every M of a (model, K)."""
    top = max(profile.sizes)
    return balance_by_cost([c.forward_s + c.backward_s for c in profile.costs[top]], K)


def _plus(c: LayerCost, o: float) -> LayerCost:
    return LayerCost(
        c.forward_s + o, c.forward_nograd_s + o, c.backward_s + o, c.out_bytes, c.update_s
    )


def as_emulated(
    slept: list[LayerCost], overshoot: float, call_s: float
) -> tuple[list[LayerCost], float]:
    """What ``simulate_cell`` is given for an emulated cell whose layers sleep ``slept``: each call
    plus the sleep's overshoot and the emulated call's CPU, and the update sleep's overshoot as the
    step's extra."""
    return [_plus(c, overshoot + call_s) for c in slept], overshoot


def dilated(costs: dict[int, list[LayerCost]], d: float) -> dict[int, list[LayerCost]]:
    """Every compute figure times ``d`` (bytes unchanged): what emulated layers sleep."""
    if not d >= 1:
        raise ValueError(f"dilation={d} is invalid; allowed: a number >= 1")
    return {
        n: [
            LayerCost(
                c.forward_s * d,
                c.forward_nograd_s * d,
                c.backward_s * d,
                c.out_bytes,
                c.update_s * d,
            )
            for c in cs
        ]
        for n, cs in costs.items()
    }


def profile_model(
    name: str, sizes: list[int], repeats: int, seed: int, ref: float | None
) -> LayerProfile:
    """A validation model's seeded layers profiled afresh at ``sizes`` with its real loss, on the
    speed probe's reference ``ref`` (None: as measured)."""
    vm = model(name)
    return profile_layers(
        vm.layers(seed),
        vm.sample,
        sizes,
        loss_fn=vm.loss,
        repeats=repeats,
        use_cache=False,
        normalize_to=ref,
    )


def fit_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x through ``points``, clamped at 0 (a cost is never negative);
    where every point has the same x, the line through the origin (y / x)."""
    if not points or any(x <= 0 for x, _ in points):
        raise ValueError(f"points={points} is invalid; allowed: at least one point, every x > 0")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return max(0.0, my / mx)
    return max(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx)


def emulation_call_s(
    model: str,
    costs: dict[int, list[LayerCost]],
    dm: DeviceModel,
    overshoot: float,
    Ms: list[int],
    warmup: int,
    steps: int,
) -> float:
    """CPU seconds one emulated layer call costs beyond its sleep (the engine's Python around it,
    autograd, the ``_Emulate`` function): K = 1 emulated steps of ``model`` at each M of ``Ms``
    against their simulation, the slope of the residual over the layer calls per step."""
    L = len(costs[N // Ms[0]])
    grid = [{"M": M, "schedule": "gpipe", "checkpoint": "never"} for M in Ms]
    per_rank = launch(C.emulated_rank, 1, (model, 1, [L], grid, costs, warmup, steps), threads=1)
    points = []
    for ct in C.step_times(per_rank):
        M = ct.cell["M"]
        lc = [_plus(c, overshoot) for c in costs[N // M]]
        sim = simulate_cell(ct.cell, 1, [L], lc, dm, overshoot).step_s
        points.append((2.0 * L * M, statistics.median(ct.times) - sim))  # forward + backward calls
    return fit_slope(points)


def cores() -> int:
    """The cores this process may run on: its affinity mask where the OS has one (a container
    limited to 2 CPUs of a large host counts 2), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks on this OS
        return os.cpu_count() or 1


def emulation_dilation(K: int, scale: float, cores: int) -> float:
    """How many times its profiled cost an emulated layer sleeps with ``K`` ranks on ``cores``
    cores: ``scale`` times the ranks per core, at least 1 (module doc, item 3)."""
    if not (K >= 1 and scale > 0 and cores >= 1):
        raise ValueError(
            f"K={K}, scale={scale}, cores={cores} are invalid; allowed: K >= 1, scale > 0, cores >= 1"
        )
    return max(1.0, scale * K / cores)


def simulate_cell(
    cell: dict,
    K: int,
    balance: list[int],
    layer_costs: list[LayerCost],
    dm: DeviceModel,
    extra_step_s: float = 0.0,
    variant: str = "model",
    shared: bool = False,
) -> SimResult:
    """One cell on the calibrated costs (``layer_costs`` at the cell's micro-batch); ``variant`` undoes
    one modelling choice (``VARIANTS``); ``shared``: the cell's ranks share this host's cores (real
    cells: ``DeviceModel.ranks_link``; emulated ranks sleep, as separate devices would)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; allowed: {', '.join(VARIANTS)}")
    link = dm.ranks_link() if shared and variant != "no_sharing" else dm.link
    if variant == "no_calls":
        link = replace(link, send_call_s=0.0, recv_call_s=0.0)
    none = variant == "no_overhead"
    return simulate(
        K,
        cell["M"],
        cell["schedule"],
        cell["checkpoint"],
        stage_costs(layer_costs, balance),
        link,
        0.0 if none else dm.overhead_s,
        sender_busy=variant == "sender_busy" or dm.sender_busy,
        step_overhead_s=(0.0 if none else dm.step_overhead_s) + extra_step_s,
        lookahead=None if variant == "posted" else DEFAULT_LOOKAHEAD,
    )


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
) -> list[tuple[dict[str, Any], list[C.CellTimes]]]:
    """Every cell of ``grid`` in ``rounds`` launches of fresh processes, each in its own order; per
    cell, its ``CellTimes`` of every round."""
    rng = random.Random(f"{s.seed}-{kind}-{model}-{K}")
    got: dict[str, list[C.CellTimes]] = {}
    for r in range(rounds):
        order = grid[:]
        rng.shuffle(order)
        t0 = time.perf_counter()
        per_rank = launch(fn, K, (model, K, balance, order, *extra, s.warmup, s.steps), threads=1)
        for ct in C.step_times(per_rank):
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
    calibration: dict[str, Any]
    roofline: list[RooflineRow] = field(default_factory=list)


def validate(out: Path, s: Settings, log: Callable[[str], None] = print) -> Validation:
    """Run everything; write ``events.jsonl`` into ``out`` and return the rows of ``validation.csv``."""
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    apply_host_memory("retain")
    t_start = time.perf_counter()
    ref = reference_s() if s.normalize else None
    sizes = sorted({N // M for M in s.Ms})
    profiles: dict[str, LayerProfile] = {}
    for name in dict.fromkeys(s.models + s.emulated_models):
        t0 = time.perf_counter()
        profiles[name] = profile_model(name, sizes, s.repeats, s.seed, ref)
        log(f"profiled {name} at micro-batches {sizes} in {time.perf_counter() - t0:.1f} s")
    dm = device_model(use_cache=False)
    overshoot = C.sleep_overshoot()
    log(f"device: {dm}; sleep overshoot {overshoot * 1e6:.0f} us")
    call_s, call_model = 0.0, None
    if s.emulated_models and s.emulated_K:
        # a model that is not emulated, so nothing about the emulated cells is fitted; at K = 1's
        # dilation (one rank queues for nothing): a call's CPU, not its sleep, is what is measured
        others = [m for m in s.models if m not in s.emulated_models]
        call_model = others[0] if others else s.models[0] if s.models else s.emulated_models[0]
        call_s = emulation_call_s(
            call_model,
            dilated(
                profiles[call_model].costs,
                emulation_dilation(1, s.dilation_scale, cores()),
            ),
            dm,
            overshoot,
            sorted(set(s.Ms)),
            s.emulated_warmup,
            s.emulated_steps,
        )
        log(
            f"emulated layer call: {call_s * 1e6:.0f} us of CPU beyond its sleep ({call_model}, K = 1)"
        )
    grid = _grid(s)
    rows: list[CellRow] = []
    dilations: dict[str, float] = {}
    every = out / "events-all.jsonl.tmp"  # every cell's last step; only the traced cells are kept
    with open(every, "w") as ev_file:
        plan = [("real", m, K) for m in s.models for K in s.real_K] + [
            ("emulated", m, K) for m in s.emulated_models for K in s.emulated_K
        ]
        for kind, name, K in plan:
            prof = profiles[name]
            balance = _partition(prof, K)
            dilation = None
            if kind == "emulated":
                dilation = emulation_dilation(K, s.dilation_scale, cores())
                dilations[f"K={K}"] = dilation
            slept = dilated(prof.costs, dilation) if dilation is not None else prof.costs
            if kind == "real":
                measured = _rounds(kind, name, K, balance, grid, s.rounds, s, C.real_rank, (), log)
            else:
                measured = _rounds(
                    kind,
                    name,
                    K,
                    balance,
                    grid,
                    s.emulated_rounds,
                    replace(s, warmup=s.emulated_warmup, steps=s.emulated_steps),
                    C.emulated_rank,
                    (slept,),
                    log,
                )
            for cell, per_round in measured:
                n = N // cell["M"]
                lc, extra = (
                    (prof.costs[n], 0.0)
                    if kind == "real"
                    else as_emulated(slept[n], overshoot, call_s)
                )
                res = simulate_cell(cell, K, balance, lc, dm, extra, shared=kind == "real")
                raw_rounds = [ct.times for ct in per_round]
                # the reference where every round was probed (real cells, with ``normalize``)
                cell_ref = ref if all(ct.probes for ct in per_round) else None
                # each round's steps on the reference speed by the median of that round's probes
                # (one probe is noisy; the machine's phases last seconds, longer than a cell)
                rounds = (
                    [
                        [normalized(t, statistics.median(ct.probes), cell_ref) for t in ct.times]
                        for ct in per_round
                    ]
                    if cell_ref is not None
                    else raw_rounds
                )
                ts = [t for r in rounds for t in r]
                raw = [t for r in raw_rounds for t in r]
                ws = [w for ct in per_round for w in ct.waits]
                evs = per_round[-1].events
                med, raw_med = statistics.median(ts), statistics.median(raw)
                sim_raw = (
                    simulate_cell(cell, K, balance, prof.raw[n], dm, shared=True).step_s
                    if cell_ref is not None and prof.raw is not None
                    else res.step_s
                )
                q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [med, med, med]
                row = {
                    "model": name,
                    "K": K,
                    **cell,
                    "kind": kind,
                    "balance": "-".join(map(str, balance)),
                    "micro_batch": n,
                    "measured_step_s": med,
                    "simulated_step_s": res.step_s,
                    "rel_error": (res.step_s - med) / med,
                    "measured_raw_step_s": raw_med,
                    "simulated_raw_step_s": sim_raw,
                    "rel_error_raw": (sim_raw - raw_med) / raw_med,
                    # the machine's speed during the cell relative to the reference (< 1: slower)
                    "speed": (
                        cell_ref / statistics.median(p for ct in per_round for p in ct.probes)
                        if cell_ref is not None
                        else None
                    ),
                    "round_spread": _spread(rounds),
                    "round_spread_raw": _spread(raw_rounds),
                    "measured_iqr_s": q[2] - q[0],
                    "steps_timed": len(ts),
                    "core_wait_share": statistics.median(ws),
                    "dilation": dilation,
                    "measured_bubble": _bubble(evs, K),
                    "simulated_bubble": res.bubble_fraction,
                }
                for v in VARIANTS:
                    if v != "model":
                        row[f"simulated_{v}_s"] = simulate_cell(
                            cell, K, balance, lc, dm, extra, v, kind == "real"
                        ).step_s
                rows.append(CellRow(**row))
                key = {k: row[k] for k in ("model", "K", "M", "schedule", "checkpoint", "kind")}
                ev_file.write(
                    json.dumps(
                        {**key, "measured": evs, "simulated": [e.to_dict() for e in res.events]}
                    )
                    + "\n"
                )
    _keep_traced(every, out / "events.jsonl", rows)
    calib = {
        "settings": asdict(s),
        "speed_reference_s": ref,
        "emulation_call_s": call_s,
        "dilations": dilations,
        "cores": cores(),
        "emulation_call_model": call_model,
        "device": dm.to_json(),
        "sleep_overshoot_s": overshoot,
        "outside_spans": list(OUTSIDE_SPANS),
        "profiles": {k: v.to_json() for k, v in profiles.items()},
        "seconds": time.perf_counter() - t_start,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }
    return Validation(rows, profiles, dm, calib)


PROFILE_HEADER = (
    "This CPU as a roofline profile, calibrated by `make validate-sim` (sim/measured/cpu.py):\n"
    "peak = the best 1-thread square fp32 matmul (16..1024), efficiency = each matmul's rate / peak\n"
    "by its FLOPs (non-decreasing), memory bandwidth = a 64 MiB copy, op_min_s = one eager operator\n"
    "call, link and overhead = this device's calibration (sim/measured/device.py). Use: hardware=<path to this file> is not a group option;\n"
    "copy it to conf/hardware/ to simulate on it."
)


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def measure(out: Path, quick: bool) -> Validation:
    """Measure into ``out`` (``quick``: ``Settings.quick``, a smoke run of every step)."""
    t0, load_before = time.perf_counter(), _load()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    v = validate(out, Settings.quick() if quick else Settings(), log=log)
    hw = cpu_roofline(v.device)
    write_profile(hw, out / "cpu.yaml", PROFILE_HEADER)
    v.roofline = roofline_rows(v.profiles, hw)
    calib = {
        **v.calibration,
        "seconds": time.perf_counter() - t0,
        "load_before": load_before,
        "load_after": _load(),
        "quick": quick,
    }
    (out / "calibration.json").write_text(json.dumps(calib, indent=1))
    return v
