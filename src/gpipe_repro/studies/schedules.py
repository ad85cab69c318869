"""What the schedules since GPipe buy (#39), computed: every cell of ``SCHEDULES`` x K x M on the
paper's Table 2 models, planned and simulated per hardware profile, and the demo model run by the
engine at K = 2 on this CPU (``paper.schedules`` writes them as ``reports/schedules/``).

Simulated: each model built once on the meta device and costed once per hardware profile
(``sensitivity.model``), every cell planned (``runplan.plan.plan_run``) and simulated
(``runplan.costing.simulate_plan``) at the table's fixed batch; a cell the schedule cannot run is
kept with the reason. Measured: the demo model at K = 2, each schedule run by the engine with
``train.predict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..config import RunConfig
from ..config.compose import compose
from ..engine import ArgumentError, check_cells
from ..engine.events import Event
from ..engine.schedule import check_schedule, ideal_bubble
from ..errors import UserError
from ..runplan.costing import simulate_plan
from ..runplan.model import ModelPlan
from ..runplan.plan import plan_run
from .sensitivity import Model
from .sensitivity import model as costed

__all__ = ["ScheduleRow", "SCHEDULES", "PAPER", "Settings", "simulated", "measured"]

# (name on the page, schedule, remat, virtual_stages)
SCHEDULES = [
    ("gpipe, remat never", "gpipe", "never", 1),
    ("gpipe, remat always", "gpipe", "always", 1),
    ("1f1b", "1f1b", "never", 1),
    ("interleaved v=2", "interleaved", "never", 2),
    ("interleaved v=4", "interleaved", "never", 4),
    ("zb-h1", "zb-h1", "never", 1),
]
PAPER = "gpipe, remat always"  # the paper's choice (with M >= 4K)


@dataclass
class ScheduleRow:
    """One cell: a schedule at (model, hardware, K, M), simulated or measured."""

    model: str
    hardware: str
    source: str  # simulated | measured
    variant: str  # SCHEDULES' name
    schedule: str
    checkpoint: str
    virtual_stages: int
    K: int
    M: int
    batch_size: int
    status: str = "ok"  # ok, or why the cell cannot run
    step_s: float | None = None
    throughput: float | None = None
    normalized: float | None = None  # to PAPER at the smallest K and M of the same model, hardware
    bubble: float | None = None  # simulated, or measured from the engine's spans
    ideal_bubble: float | None = None
    peak_bytes: int | None = None  # the largest stage's planned peak
    stage_peaks: str = ""  # every stage's, ';'-separated
    memory_bytes: int | None = None  # one device's memory (the profile's)
    predicted_step_s: float | None = None  # measured cells: the simulator's on this CPU's costs


@dataclass
class Settings:
    """The grid (``tiny``: the test's)."""

    models: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("AmoebaNet-D(18, 256)", ("experiment=table2_amoebanet",)),
        ("Transformer-48", ("experiment=table2_transformer",)),
    )
    hardware: tuple[str, ...] = ("tpu_v3", "measured")
    Ks: tuple[int, ...] = (2, 4, 8)
    Ms: tuple[int, ...] = (1, 4, 8, 32)
    timeline: tuple[int, int] = (4, 8)  # (K, M) drawn per schedule
    demo: tuple[str, ...] = ("experiment=demo", "train.steps=8", "train.warmup_steps=3")
    demo_Ms: tuple[int, ...] = (4, 8)


def _cell(
    name: str, hw_name: str, spec: RunConfig, m: Model, v: tuple
) -> tuple[ScheduleRow, list[Event]]:
    variant, schedule, remat, vs = v
    p, layers = spec.pipeline, m.plan.layers
    row = ScheduleRow(
        name, hw_name, "simulated", variant, schedule, remat, vs, p.K, p.M,
        spec.train.batch_size, memory_bytes=m.hw.memory_bytes,
    )  # fmt: skip
    try:
        check_schedule(schedule, p.K, p.M, vs)
        check_cells(p.K, vs, len(layers))
        run = plan_run(spec, m.plan, hardware=m.hw, costs=m.costs)
    except (ArgumentError, UserError, ValueError) as err:
        row.status = str(err).splitlines()[0][:160]
        return row, []
    res = simulate_plan(spec, m.hw, m.costs, run.balance, run.micro_batch, layers=layers)
    row.step_s, row.bubble = res.step_s, res.bubble_fraction
    row.throughput = spec.train.batch_size / res.step_s
    row.ideal_bubble = ideal_bubble(schedule, p.K, p.M, vs)
    peaks = [s.total for s in run.stages]
    row.peak_bytes, row.stage_peaks = max(peaks), ";".join(map(str, peaks))
    return row, res.events


def simulated(s: Settings, hardware: tuple[str, ...]) -> tuple[list[ScheduleRow], dict]:
    """Every simulated cell, and the drawn timelines' events (by model, hardware, variant)."""
    rows, lines = [], {}
    for name, overrides in s.models:
        plan: ModelPlan | None = None
        for hw_name in hardware:
            m = costed(overrides, hw_name, plan)
            plan = m.plan
            for K in s.Ks:
                for M in s.Ms:
                    for v in SCHEDULES:
                        pipe = replace(
                            m.spec.pipeline, K=K, M=M, schedule=v[1], checkpoint=v[2],
                            virtual_stages=v[3], balance=None,
                        )  # fmt: skip
                        row, events = _cell(name, hw_name, replace(m.spec, pipeline=pipe), m, v)
                        rows.append(row)
                        if (K, M) == s.timeline and events:
                            lines[f"{name}|{hw_name}|{v[0]}"] = [asdict(e) for e in events]
    return _normalise(rows), lines


def measured(s: Settings, out: Path) -> list[ScheduleRow]:
    """The demo model at K = 2 on this CPU, each schedule run by the engine."""
    from ..runner import run

    rows = []
    for M in s.demo_Ms:
        for variant, schedule, remat, vs in SCHEDULES:
            spec = compose(
                [
                    *s.demo, "pipeline.K=2", f"pipeline.M={M}", f"pipeline.schedule={schedule}",
                    f"pipeline.checkpoint={remat}", f"pipeline.virtual_stages={vs}",
                    # the report's own runs: making it again replaces them
                    "train.predict=true", "logger=none", "train.overwrite=true",
                ]
            )  # fmt: skip
            row = ScheduleRow(
                "demo (tuplenet, digits)", "this CPU", "measured", variant, schedule, remat, vs,
                2, M, spec.train.batch_size,
            )  # fmt: skip
            folder = out / "runs" / f"M{M}-{schedule}-{remat}-v{vs}"
            m = run(spec, folder)
            if m is None or m.status != "ok" or m.step_time_s is None:
                row.status = (m.error if m is not None else None) or "the run failed"
            else:
                row.step_s, row.throughput = m.step_time_s, m.throughput
                row.bubble, row.ideal_bubble = m.bubble_fraction, m.bubble_ideal
                peaks = [st.peak_memory_bytes for st in m.stages if st.peak_memory_bytes]
                row.peak_bytes = max(peaks) if peaks else None
                row.stage_peaks = ";".join(map(str, peaks))
                row.predicted_step_s = m.predicted_step_time_s
            rows.append(row)
    return _normalise(rows)


def _normalise(rows: list[ScheduleRow]) -> list[ScheduleRow]:
    """Throughput over PAPER's at the smallest K and M of the same model, hardware and source."""
    for r in rows:
        mine = [
            b
            for b in rows
            if (b.model, b.hardware, b.source) == (r.model, r.hardware, r.source)
            and b.variant == PAPER
            and b.throughput
        ]
        if r.throughput and mine:
            ref = min(mine, key=lambda b: (b.K, b.M))
            r.normalized = r.throughput / ref.throughput  # type: ignore[operator]
    return rows
