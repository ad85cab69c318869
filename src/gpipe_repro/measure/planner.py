"""``make validate-plan``: per model, calibrate, plan under three caps, measure every configuration.

1. **Calibrate** as the simulator's validation does (``calibration.calibrate``; nothing fitted to the
   configurations measured), then each model's layers profiled at every micro-batch the search uses.
2. **Plan** (``scenarios``): the caps, then per cap the planner's list and the rules of thumb.
3. **Measure** (``configs``): the union over the caps of every listed and every rule's fitting
   configuration, each once per round (a configuration listed under two caps is measured once).
   An emulated configuration's layers sleep its dilation times their cost (``calibration``); its
   measured step is put back on the device's time scale by the simulation's ratio of the two scales
   (``device_scale``): measured x sim(costs) / sim(dilated costs + the emulation's sleep overshoot,
   call cost and per-action cost), i.e. the simulation on the device's scale with the emulation's relative error at
   the dilated one.
4. **Rows** (``PlanRow``): per scenario, every listed configuration (its rank) and every rule's
   configuration, prediction beside measurement.

``calibration.json`` keeps the settings, the seconds of each phase and the counts the full target's
wall time is predicted from (``predicted_full_s``: this run's seconds per phase scaled by the grids'
sizes: an estimate, said so where it is shown).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..engine.hostmem import apply_host_memory
from ..sim.measured import DeviceModel, LayerProfile
from .calibration import Calibration, as_emulated, calibrate, dilated, profile_model, simulate_cell
from .calibration import Settings as Calibrated
from .configs import REAL_K, Measured, measure_configs
from .models import N, model
from .scenarios import RULES, Planned, Predictor, rule_configs

MIB = 2**20


@dataclass
class PlanRow:
    """One configuration of one scenario: the planner's prediction beside its measurement."""

    scenario: str  # model/cap
    model: str
    cap: str  # loose | mid | tight
    cap_mib: float
    K: int
    M: int
    schedule: str
    checkpoint: str  # one mode per stage, "/"-joined
    balance: str  # layers per stage, "-"-joined
    kind: str  # real | emulated
    micro_batch: int
    planner_rank: int | None  # place in the planner's list (1 = the pick); None: a rule's alone
    rules: str  # the rules of thumb that give this configuration, ";"-joined
    fits: bool  # predicted per-stage peaks all within the cap
    predicted_step_s: float
    predicted_peak_mib: str  # per stage, "/"-joined
    measured_step_s: float | None = None  # median over every timed step of every round
    round1_s: float | None = None  # the first round's median
    round2_s: float | None = None  # the second round's median (None: one round)
    measured_peak_mib: str = ""  # per stage, "/"-joined; empty: emulated or not measured
    core_wait_share: float | None = None


@dataclass
class Settings(Calibrated):
    """The scenarios of ``make validate-plan`` (``quick``: small ones, every step)."""

    models: list[str] = field(
        default_factory=lambda: ["amoebanet", "transformer", "translation", "imbalanced"]
    )
    caps: list[str] = field(default_factory=lambda: ["loose", "mid", "tight"])
    Ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    max_m: int = 32
    dilation_scale: float = 2.5  # half the simulator validation's: the target stays under an hour

    @classmethod
    def quick(cls) -> Settings:
        """Small scenarios, every step of the full run (a few minutes)."""
        return cls(
            models=["transformer", "imbalanced"], caps=["loose", "tight"], Ks=[1, 2, 4], max_m=4,
            warmup=1, steps=2, repeats=3,
        )  # fmt: skip


def ms_of(s: Settings) -> list[int]:
    """The M searched: divisors of the mini-batch up to ``max_m``."""
    return [m for m in range(1, min(N, s.max_m) + 1) if N % m == 0]


def _sizes(s: Settings) -> list[int]:
    Ms = ms_of(s) + [min(4 * K, N) for K in s.Ks]  # the rule M = 4K too
    return sorted({N // m for m in Ms})


def device_scale(
    key: tuple[Any, ...],
    prof: LayerProfile,
    dm: DeviceModel,
    dilation: float,
    overshoot: float,
    call_s: float,
    action_s: float = 0.0,
) -> float:
    """What an emulated configuration's measured step at ``dilation`` is multiplied by to put it on
    the device's time scale: the simulated step on the profiled costs over the simulated step of
    the emulation (the costs dilated, each layer call plus the sleep's overshoot and the emulated
    call's CPU, the update's overshoot, each action plus ``action_s``: what the emulated ranks pay
    per action, ``calibration.emulation_action_s``) — the emulation's relative error carried over."""
    K, M, schedule, checkpoint, balance = key
    n = N // M
    cell = {"M": M, "schedule": schedule, "checkpoint": list(checkpoint)}
    if len(balance) > K:  # K·v cells: v per stage (#39)
        cell["virtual_stages"] = len(balance) // K
    one = simulate_cell(cell, K, list(balance), prof.costs[n], dm).step_s
    slept, extra = as_emulated(dilated(prof.costs, dilation)[n], overshoot, call_s)
    emulated = replace(dm, overhead_s=dm.overhead_s + action_s)
    return one / simulate_cell(cell, K, list(balance), slept, emulated, extra).step_s


def _row(
    sc: str, name: str, cap: str, cap_b: int, p: Planned, rank: int | None, rules: list[str]
) -> PlanRow:
    c = p.c
    return PlanRow(
        scenario=sc,
        model=name,
        cap=cap,
        cap_mib=round(cap_b / MIB, 3),
        K=c.K,
        M=c.M,
        schedule=c.schedule,
        checkpoint="/".join(c.checkpoint),
        balance="-".join(map(str, c.balance)),
        kind="real" if c.K <= REAL_K else "emulated",
        micro_batch=c.micro_batch,
        planner_rank=rank,
        rules=";".join(rules),
        fits=max(p.stage_bytes) <= cap_b,
        predicted_step_s=p.step_s,
        predicted_peak_mib="/".join(f"{b / MIB:.3f}" for b in p.stage_bytes),
    )


def collect(s: Settings, log: Callable[[str], None]) -> tuple[list[PlanRow], Calibration]:
    """Every scenario's rows and the calibration (module doc)."""
    apply_host_memory("retain")
    t_start = time.perf_counter()
    emulated_K = [K for K in s.Ks if K > REAL_K]
    call = s.models[0] if emulated_K and s.models else None
    calib, dm, profiles = calibrate(s, _sizes(s), ms_of(s), emulated_K, call, log)
    ref, overshoot, call_s = (
        calib.speed_reference_s,
        calib.sleep_overshoot_s,
        calib.emulation_call_s,
    )
    rows: list[PlanRow] = []
    phases = {"profile": time.perf_counter() - t_start, "plan": 0.0, "measure": 0.0}
    counts = {"configs": 0, "config_rounds": 0, "real": 0, "emulated": 0}
    for name in s.models:
        t0 = time.perf_counter()
        if name not in profiles:
            profiles[name] = profile_model(name, calib.sizes, s.repeats, s.seed, ref)
        prof = profiles[name]
        phases["profile"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        pred = Predictor(model(name), prof, dm, s.Ks, s.max_m)
        caps = {k: v for k, v in pred.caps().items() if k in s.caps}
        calib.caps_mib[name] = {
            "naive": pred.naive() / MIB,
            **{k: v / MIB for k, v in caps.items()},
        }
        plans: dict[str, tuple[list[Planned], dict[str, Planned]]] = {}
        for cap, cap_b in caps.items():
            ranked = pred.ranked(cap_b)
            plans[cap] = (ranked, rule_configs(pred, ranked[0], cap_b) if ranked else {})
        phases["plan"] += time.perf_counter() - t0
        keys = [
            p.key
            for cap, (ranked, rules) in plans.items()
            for p in [*ranked, *rules.values()]
            if max(p.stage_bytes) <= caps[cap]
        ]
        t0 = time.perf_counter()
        steps = (s.emulated_warmup, s.emulated_steps)
        got = measure_configs(
            name, keys, prof, ref, s.rounds, s.warmup, s.steps, s.seed, log, calib.dilation, steps
        )
        for k, config in got.items():  # emulated: back on the device's time scale
            if k[0] > REAL_K:
                f = device_scale(
                    k, prof, dm, config.dilation, overshoot, call_s or 0.0,
                    calib.emulation_action_s.get(f"K={k[0]}", 0.0),
                )  # fmt: skip
                config.step_s, config.rounds = config.step_s * f, [r * f for r in config.rounds]
        phases["measure"] += time.perf_counter() - t0
        counts["configs"] += len(got)
        counts["config_rounds"] += len(got) * s.rounds
        counts["real"] += sum(k[0] <= REAL_K for k in got)
        counts["emulated"] += sum(k[0] > REAL_K for k in got)
        for cap, (ranked, rules) in plans.items():
            rows += _scenario(name, cap, caps[cap], ranked, rules, got)
        log(
            f"{name}: {len(got)} configurations measured, {time.perf_counter() - t_start:.0f} s so far"
        )
    calib.phases_s, calib.counts = phases, counts
    calib.finish(t_start)
    calib.predicted_full_s = predicted_full_s(s, calib)
    return rows, calib


def _scenario(
    name: str,
    cap: str,
    cap_b: int,
    ranked: list[Planned],
    rules: dict[str, Planned],
    got: dict[tuple[Any, ...], Measured],
) -> list[PlanRow]:
    """One scenario's rows: every listed configuration and every rule's, with its measurement."""
    by_rule: dict[Any, list[str]] = {}
    for rule in RULES:
        if rule in rules:
            by_rule.setdefault(rules[rule].key, []).append(rule)
    listed = {p.key for p in ranked}
    shown: list[tuple[Planned, int | None]] = [(p, i + 1) for i, p in enumerate(ranked)]
    extra = {rules[r].key: rules[r] for r in RULES if r in rules and rules[r].key not in listed}
    shown += [(p, None) for p in extra.values()]
    rows = []
    for p, rank in shown:
        row = _row(f"{name}/{cap}", name, cap, cap_b, p, rank, by_rule.get(p.key, []))
        m = got.get(p.key) if row.fits else None
        if m is not None:
            row.measured_step_s = m.step_s
            row.round1_s = m.rounds[0]
            row.round2_s = m.rounds[1] if len(m.rounds) > 1 else None
            row.measured_peak_mib = "/".join(f"{b / MIB:.3f}" for b in m.peaks)
            row.core_wait_share = m.wait
        rows.append(row)
    return rows


def run(out: Path, quick: bool, log: Callable[[str], None]) -> tuple[list[PlanRow], Calibration]:
    """Measure into ``out`` (``quick``: ``Settings.quick``): ``calibration.json`` written; the rows
    of ``validation.csv`` and the calibration returned."""
    rows, calib = collect(Settings.quick() if quick else Settings(), log)
    calib.quick = quick
    calib.save(out)
    return rows, calib


def _grid(s: Settings) -> int:
    """Configurations the planner can list, up to the partitions: models x caps x K x (M, schedule)."""
    per_m = sum(1 if m == 1 else 2 for m in ms_of(s))
    return len(s.models) * len(s.caps) * len(s.Ks) * per_m


def predicted_full_s(s: Settings, calib: Calibration) -> float:
    """The full target's wall time from this run's: each phase's seconds scaled by the full grid's
    size over this run's (profiling by models x sizes x repeats; measuring by the configurations'
    grid x rounds x (warm-up + timed steps))."""
    full = Settings()
    ph = calib.phases_s
    prof = (
        ph["profile"]
        * (len(full.models) * len(_sizes(full)) * full.repeats)
        / max(1, len(s.models) * len(calib.sizes) * s.repeats)
    )
    steps = (full.warmup + full.steps) / (s.warmup + s.steps)
    meas = ph["measure"] * (_grid(full) * full.rounds) / max(1, _grid(s) * s.rounds) * steps
    plan = ph["plan"] * len(full.models) / max(1, len(s.models))
    return prof + meas + plan
