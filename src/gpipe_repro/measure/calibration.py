"""The one host calibration of a validation experiment, and a cell simulated on it.

Before any cell is measured (nothing here is fitted to the cells validated), ``calibrate`` measures
the speed probe's reference (``sim.measured.speed``), this device's link and the engine's overheads
(``sim.measured.device_model``, afresh, not from the cache), how far ``time.sleep`` overshoots and,
for an experiment that emulates, the CPU an emulated layer call costs beyond its sleep
(``emulation_call_s``) and, at each emulated K, what each action of K emulated ranks sharing the
cores costs beyond that (``emulation_action_s``). Its typed result, ``Calibration``, is the one
shape of every experiment's ``calibration.json``: ``make validate-sim`` and ``make validate-plan``
add their own figures (the profiles, the caps, the phases' seconds) to the same fields, and their
pages read them back.

**Emulation's time dilation.** With K ranks on a few cores, the engine's own CPU work (the Python
around each layer call, autograd, gloo's threads) queues for the cores, which K devices would not;
so an emulated layer sleeps its profiled cost times a dilation that grows with the ranks per core
(``emulation_dilation``), and each cell's *core wait* is reported beside its error
(``reports/sim/sim.md`` shows both per cell).

``simulate_cell`` is the simulator on these costs: a cell's layers at its micro-batch, the device's
link (``DeviceModel.ranks_link`` where real ranks share this host's cores) and overheads, with one
modelling choice of ``VARIANTS`` undone where asked.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from ..engine import balance_by_cost, launch
from ..engine.pipeline import DEFAULT_LOOKAHEAD
from ..errors import UserError
from ..sim.costs import LayerCost, stage_costs
from ..sim.measured import DeviceModel, LayerProfile, ProfileError, device_model, profile_layers
from ..sim.measured.device import host_cores as cores
from ..sim.measured.profile import OUTSIDE_SPANS, median_profile
from ..sim.measured.speed import reference_s
from ..sim.simulate import SimResult, simulate
from . import ranks
from .emulate import sleep_until
from .models import N, calibration_model, model

# The calibrated model, and each of its modelling choices undone: the report shows what each one buys.
VARIANTS = {
    "model": "the calibrated model",
    "sender_busy": "a send occupies its sender for the whole transfer",
    "posted": "receives always posted (no gloo rendezvous)",
    "no_calls": "posting sends and receives is free",
    "no_sharing": "a message costs ranks sharing the host's cores nothing beyond posting it",
    "no_overhead": "no engine overhead per action or step",
}


@dataclass
class Settings:
    """What every calibrated experiment sets (each experiment's own ``Settings`` adds its grid)."""

    models: list[str] = field(default_factory=list)
    rounds: int = 2  # launches of fresh processes, each in a new order
    warmup: int = 2
    steps: int = 3
    repeats: int = 5  # profile repeats per layer and size
    # profiles of each model, taken in passes over every model (``profile_models``); the
    # simulator's costs are their median
    profile_passes: int = 1
    seed: int = 0
    normalize: bool = True  # put real cells and the profile on the speed probe's reference speed
    dilation_scale: float = 5.0  # emulated layers sleep this x (ranks per core) x their cost
    emulated_warmup: int = 1
    emulated_steps: int = 2


@dataclass
class Calibration:
    """``calibration.json``: the settings, what ``calibrate`` measured, and what the experiment adds
    (None or empty where it adds nothing)."""

    settings: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)  # ``DeviceModel.to_json``
    speed_reference_s: float | None = None
    sleep_overshoot_s: float = 0.0
    cores: int | None = None
    dilations: dict[str, float] = field(default_factory=dict)  # "K=4" -> dilation
    emulation_call_s: float | None = None
    emulation_call_model: str | None = None
    # "K=4" -> seconds each forward or backward action of K emulated ranks costs beyond the
    # simulation of K devices (``emulation_action_s``); empty in files written before it was measured
    emulation_action_s: dict[str, float] = field(default_factory=dict)
    outside_spans: list[str] = field(default_factory=list)
    # which messages of ranks sharing the host's cores pay ``shared_message_s`` (``simulate``):
    # "receives", every receive of ranks that fill the cores; "cores taken", the sends and receives
    # posted while the other ranks' compute took every core; None: every message
    sharing: str | None = None
    sizes: list[int] = field(default_factory=list)  # the micro-batches profiled
    profiles: dict[str, Any] = field(default_factory=dict)  # model -> ``LayerProfile.to_json``
    caps_mib: dict[str, dict[str, float]] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    predicted_full_s: float | None = None
    seconds: float | None = None
    load_before: str | None = None
    load_after: str | None = None
    torch: str | None = None
    python: str | None = None
    quick: bool = False

    def dilation(self, K: int) -> float:
        """How many times its cost an emulated layer sleeps at ``K`` ranks (``emulation_dilation``)."""
        return emulation_dilation(K, self.settings["dilation_scale"], self.cores or 1)

    def emulated_device(self, dm: DeviceModel, K: int) -> DeviceModel:
        """``dm`` as the simulation of an emulated cell of ``K`` ranks charges it: each action's
        overhead plus ``emulation_action_s`` at ``K`` (none where it was not measured)."""
        return replace(dm, overhead_s=dm.overhead_s + self.emulation_action_s.get(f"K={K}", 0.0))

    def finish(self, t0: float) -> None:
        """The experiment's wall time since ``t0`` (``time.perf_counter``) and the load after it."""
        self.seconds, self.load_after = time.perf_counter() - t0, _load()

    def save(self, folder: Path) -> None:
        (folder / "calibration.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, folder: Path) -> Calibration | None:
        """``folder/calibration.json`` (None: not there); keys another version wrote are left out."""
        path = folder / "calibration.json"
        if not path.exists():
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(path.read_text()).items() if k in known})


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def emulation_dilation(K: int, scale: float, cores: int) -> float:
    """How many times its profiled cost an emulated layer sleeps with ``K`` ranks on ``cores``
    cores: ``scale`` times the ranks per core, at least 1 (module doc)."""
    if not (K >= 1 and scale > 0 and cores >= 1):
        raise ValueError(
            f"K={K}, scale={scale}, cores={cores} are invalid; allowed: K >= 1, scale > 0, cores >= 1"
        )
    return max(1.0, scale * K / cores)


def sleep_overshoot(samples: int = 200, duration_s: float = 1e-3) -> float:
    """Median seconds ``sleep_until`` sleeps past its deadline here (each emulated call pays it)."""
    over = []
    for _ in range(samples):
        t0 = time.perf_counter()
        sleep_until(t0 + duration_s)
        over.append(time.perf_counter() - t0 - duration_s)
    return statistics.median(over)


def profile_model(
    name: str, sizes: list[int], repeats: int, seed: int, ref: float | None
) -> LayerProfile:
    """A validation model's seeded layers profiled afresh at ``sizes`` with its real loss, on the
    speed probe's reference ``ref`` (None: as measured). A stream the machine's noise made
    inconsistent is timed again (``profile.checked_stream``); one refused every time ends the run
    with its figures."""
    vm = model(name)
    try:
        return profile_layers(
            vm.layers(seed), vm.sample, sizes, loss_fn=vm.loss, repeats=repeats, use_cache=False,
            normalize_to=ref,
        )  # fmt: skip
    except ProfileError as err:
        raise UserError(f"{name}: {err}") from None


def profile_models(
    wanted: dict[str, list[int]], s: Settings, ref: float | None, log: Callable[[str], None]
) -> dict[str, LayerProfile]:
    """Each model of ``wanted`` (name -> micro-batch sizes) profiled ``s.profile_passes`` times, in
    passes over every model so that one model's profiles lie minutes apart, and the median of its
    profiles kept (``median_profile``): one profile is one stream, which the host's speed that
    minute moves as a whole."""
    if s.profile_passes < 1:
        raise UserError(f"profile_passes={s.profile_passes} is invalid; allowed: an integer >= 1")
    taken: dict[str, list[LayerProfile]] = {name: [] for name in wanted}
    for p in range(s.profile_passes):
        for name, sizes in wanted.items():
            t0 = time.perf_counter()
            taken[name].append(profile_model(name, sizes, s.repeats, s.seed, ref))
            log(
                f"profiled {name} at micro-batches {sizes} in {time.perf_counter() - t0:.1f} s "
                f"(pass {p + 1}/{s.profile_passes})"
            )
    return {name: median_profile(got) for name, got in taken.items()}


def _plus(c: LayerCost, o: float) -> LayerCost:
    """``c`` with ``o`` added to every emulated call: forward, backward, and B and W apart (each
    its own sleep under a split schedule)."""
    b, w = c.backward_input_s, c.backward_weight_s
    return LayerCost(
        c.forward_s + o, c.forward_nograd_s + o, c.backward_s + o, c.out_bytes, c.update_s,
        backward_input_s=None if b is None else b + o,
        backward_weight_s=None if w is None else w + o,
    )  # fmt: skip


def dilated(costs: dict[int, list[LayerCost]], d: float) -> dict[int, list[LayerCost]]:
    """Every compute figure times ``d`` (bytes unchanged): what emulated layers sleep. The
    recompute is dropped: an emulated layer's recompute sleeps its forward."""
    if not d >= 1:
        raise ValueError(f"dilation={d} is invalid; allowed: a number >= 1")

    def scaled(x: float | None) -> float | None:
        return None if x is None else x * d

    return {
        n: [
            LayerCost(c.forward_s * d, c.forward_nograd_s * d, c.backward_s * d, c.out_bytes,
                      c.update_s * d, backward_input_s=scaled(c.backward_input_s),
                      backward_weight_s=scaled(c.backward_weight_s))
            for c in cs
        ]
        for n, cs in costs.items()
    }  # fmt: skip


def as_emulated(
    slept: list[LayerCost], overshoot: float, call_s: float
) -> tuple[list[LayerCost], float]:
    """What ``simulate_cell`` is given for an emulated cell whose layers sleep ``slept``: each call
    plus the sleep's overshoot and the emulated call's CPU, and the update sleep's overshoot as the
    step's extra."""
    return [_plus(c, overshoot + call_s) for c in slept], overshoot


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
    """One cell on the calibrated costs (``layer_costs`` at the cell's micro-batch; a cell of
    several model cells per rank carries its ``virtual_stages`` and its own ``balance``); ``variant`` undoes
    one modelling choice (``VARIANTS``); ``shared``: the cell's ranks share this host's cores (real
    cells: ``DeviceModel.ranks_link``; emulated ranks sleep, as separate devices would)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; allowed: {', '.join(VARIANTS)}")
    link = dm.ranks_link(cores()) if shared and variant != "no_sharing" else dm.link
    if variant == "no_calls":
        link = replace(link, send_call_s=0.0, recv_call_s=0.0, shared_s=0.0)
    none = variant == "no_overhead"
    return simulate(
        K, cell["M"], cell["schedule"], cell["checkpoint"],
        stage_costs(layer_costs, cell.get("balance", balance)), link,
        0.0 if none else dm.overhead_s,
        sender_busy=variant == "sender_busy" or dm.sender_busy,
        step_overhead_s=(0.0 if none else dm.step_overhead_s) + extra_step_s,
        lookahead=None if variant == "posted" else DEFAULT_LOOKAHEAD,
        virtual_stages=cell.get("virtual_stages", 1),
    )  # fmt: skip


def fit_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x through ``points`` (``np.polyfit``), clamped at 0 (a cost is
    never negative); where every point has the same x, the line through the origin (y / x)."""
    if not points or any(x <= 0 for x, _ in points):
        raise ValueError(f"points={points} is invalid; allowed: at least one point, every x > 0")
    xs, ys = np.array(points, dtype=float).T
    if np.ptp(xs) == 0:
        return max(0.0, float(ys.mean() / xs[0]))
    return max(0.0, float(np.polyfit(xs, ys, 1)[0]))


def emulation_call_s(
    name: str,
    costs: dict[int, list[LayerCost]],
    dm: DeviceModel,
    overshoot: float,
    Ms: list[int],
    warmup: int,
    steps: int,
) -> float:
    """CPU seconds one emulated layer call costs beyond its sleep (the engine's Python around it,
    autograd, the ``_Emulate`` function): K = 1 emulated steps of ``name`` at each M of ``Ms``
    against their simulation, the slope of the residual over the layer calls per step."""
    L = len(costs[N // Ms[0]])
    grid = [{"M": M, "schedule": "gpipe", "checkpoint": "never"} for M in Ms]
    per_rank = launch(ranks.emulated_rank, 1, (name, 1, [L], grid, costs, warmup, steps), threads=1)
    points = []
    for ct in ranks.step_times(per_rank):
        M = ct.cell["M"]
        lc = [_plus(c, overshoot) for c in costs[N // M]]
        sim = simulate_cell(ct.cell, 1, [L], lc, dm, overshoot).step_s
        points.append((2.0 * L * M, statistics.median(ct.times) - sim))  # forward + backward calls
    return fit_slope(points)


def partition(profile: LayerProfile, K: int) -> list[int]:
    """The min-max partition of the profiled forward + backward time at the largest profiled
    micro-batch (N, M = 1, in the full grid); one partition for every M of a (model, K)."""
    top = max(profile.sizes)
    return balance_by_cost([c.forward_s + c.backward_s for c in profile.costs[top]], K)


def fit_extra(measured: list[float], simulated: Callable[[float], list[float]], hi: float) -> float:
    """The ``x`` in [0, ``hi``] for which ``simulated(x)`` (one step per measured step) comes
    closest to ``measured``: the least squares of the relative errors, by scipy's bounded scalar
    minimisation (a cost is never negative)."""
    if not measured or any(not t > 0 for t in measured):
        raise ValueError(f"measured={measured} is invalid; allowed: at least one step, every > 0")
    m = np.array(measured, dtype=float)

    def loss(x: float) -> float:
        return float(np.sum((np.array(simulated(x)) / m - 1.0) ** 2))

    res = minimize_scalar(loss, bounds=(0.0, hi), method="bounded", options={"xatol": 1e-7})
    return float(res.x) if loss(float(res.x)) < loss(0.0) else 0.0


def emulation_action_s(
    name: str,
    K: int,
    balance: list[int],
    slept: dict[int, list[LayerCost]],
    dm: DeviceModel,
    overshoot: float,
    call_s: float,
    Ms: list[int],
    warmup: int,
    steps: int,
) -> float:
    """Seconds each forward or backward action of ``K`` emulated ranks costs beyond what the
    simulation of K devices charges it (the layers' sleeps, their overshoot and call CPU, the
    engine's per-action overhead measured at K = 1): what ranks that sleep and block in turn pay
    on a few shared cores — waking from a sleep or a receive, gloo's threads, the engine's Python
    between actions, each queued behind the other ranks'. ``K``-rank emulated steps of ``name``
    (its layers sleeping ``slept``; gpipe, remat never and always, at each M of ``Ms``) against
    their simulation: the extra per-action overhead that fits them best (``fit_extra``)."""
    grid = [
        {"M": M, "schedule": "gpipe", "checkpoint": ck} for M in Ms for ck in ("never", "always")
    ]
    per_rank = launch(
        ranks.emulated_rank, K, (name, K, balance, grid, slept, warmup, steps), threads=1
    )
    got = [(ct.cell, statistics.median(ct.times)) for ct in ranks.step_times(per_rank)]

    def simulated(x: float) -> list[float]:
        d = replace(dm, overhead_s=dm.overhead_s + x)
        out = []
        for cell, _ in got:
            lc, extra = as_emulated(slept[N // cell["M"]], overshoot, call_s)
            out.append(simulate_cell(cell, K, balance, lc, d, extra).step_s)
        return out

    return fit_extra([t for _, t in got], simulated, hi=0.01)


def calibrate(
    s: Settings,
    sizes: list[int],
    Ms: list[int],
    emulated_K: list[int],
    call_model: str | None,
    log: Callable[[str], None],
    profile: dict[str, list[int]] | None = None,
) -> tuple[Calibration, DeviceModel, dict[str, LayerProfile]]:
    """The host calibrated for experiment ``s`` (module doc), its dilation at each of ``emulated_K``
    and, with ``call_model``, the emulated call's CPU on that model: K = 1 emulated steps at each M
    of ``Ms``, at K = 1's dilation (one rank queues for nothing: a call's CPU, not its sleep, is
    measured); then, at each of ``emulated_K``, the cost per action of K emulated ranks on the same
    model (``emulation_action_s``). Returns the profiles of ``profile``'s models (name -> sizes)
    and of ``call_model`` at ``sizes``, taken together (``profile_models``)."""
    if call_model is not None:  # refused before anything runs: never fitted on (``HELD_OUT``)
        calibration_model(call_model)
    load = _load()
    torch.set_num_threads(1)
    ref = reference_s() if s.normalize else None
    dm = device_model(use_cache=False)
    overshoot = sleep_overshoot()
    log(f"device: {dm}; sleep overshoot {overshoot * 1e6:.0f} us")
    calib = Calibration(
        asdict(s), dm.to_json(), ref, overshoot, cores(), outside_spans=list(OUTSIDE_SPANS),
        sharing="receives", sizes=sizes, load_before=load, torch=torch.__version__,
        python=sys.version.split()[0],
    )  # fmt: skip
    calib.dilations = {f"K={K}": calib.dilation(K) for K in emulated_K}
    wanted = dict(profile or {})
    if call_model is not None:
        wanted[call_model] = sorted(set(wanted.get(call_model, [])) | set(sizes))
    profiles = profile_models(wanted, s, ref, log)
    if call_model is not None:
        costs = dilated(profiles[call_model].costs, calib.dilation(1))
        steps = (s.emulated_warmup, s.emulated_steps)
        calib.emulation_call_s = emulation_call_s(call_model, costs, dm, overshoot, Ms, *steps)
        calib.emulation_call_model = call_model
        log(f"emulated layer call: {calib.emulation_call_s * 1e6:.0f} us of CPU ({call_model})")
        for K in emulated_K:
            prof = profiles[call_model]
            x = emulation_action_s(
                call_model, K, partition(prof, K), dilated(prof.costs, calib.dilation(K)), dm,
                overshoot, calib.emulation_call_s, Ms, *steps,
            )  # fmt: skip
            calib.emulation_action_s[f"K={K}"] = x
            log(f"emulated action at K={K}: {x * 1e6:.0f} us beyond the simulation ({call_model})")
    return calib, dm, profiles
