"""A sweep's rows: one per job, failed ones too, from every job's ``metrics.json`` (``paper.runs``).

The collect half of ``paper.sweep`` (its page is the other half): each job's recorded values as they
are, the throughput of each series (one model on one hardware with one batch mode) normalised to its
smallest (K, M), as the paper's Table 2 does, and the speed-up over K = 1 at the same M beside GPipe's
ideal K·M/(M+K-1) = K·(1 - bubble) (§2.3: only the bubble is lost). ``reports.status`` counts this
module for the reports whose numbers it makes; the page code beside it only renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from ..metrics.contract import RunMetrics
from .provenance import Provenance
from .runs import read_sweep


@dataclass
class SweepRow:
    """One job of a sweep: what it recorded and what is derived from it."""

    job: str
    status: str
    source: str | None = None
    hardware: str | None = None
    model: str | None = None
    K: int | None = None
    M: int | None = None
    checkpoint: str | None = None
    schedule: str | None = None
    replicas: int | None = None
    balance: str | None = None
    batch_size: int | None = None
    batch_mode: str | None = None
    micro_batch: int | None = None
    param_count: int | None = None
    throughput: float | None = None
    normalized_throughput: float | None = None
    speedup_vs_k1: float | None = None
    speedup_vs_best_k1: float | None = None
    speedup_ideal: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    predicted_step_time_s: float | None = None
    predicted_throughput: float | None = None
    prediction_error: float | None = None
    bubble_fraction: float | None = None
    bubble_ideal: float | None = None
    stage_busy_s: str | None = None
    stage_recompute_s: str | None = None
    max_stage_memory_bytes: int | None = None
    stage_memory_bytes: str | None = None
    memory_source: str | None = None
    fits_memory: bool | None = None
    eval_accuracy: float | None = None
    final_loss: float | None = None
    error: str | None = None


# What a row takes from a run's metrics.json (and its pipeline) as it is.
AS_RUN = "status source batch_size batch_mode throughput tokens_per_s step_time_s error".split()
AS_RUN += "predicted_step_time_s predicted_throughput bubble_fraction bubble_ideal".split()
AS_RUN_PIPELINE = ("K", "M", "checkpoint", "schedule", "replicas")


def _positive(*values: Any) -> bool:
    """Whether every value is a positive number: only those enter a row's arithmetic."""
    return all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in values)


def _row(job: str, m: RunMetrics) -> SweepRow:
    """A job's row. What the job recorded is copied as it is; what is derived from it (the
    micro-batch here, the ratios in ``sweep_rows``) only from an ok job's positive values — a failed
    job keeps what it was asked (M = 0 included) and its error, and divides nothing."""
    p, stages, hw = m.pipeline, m.stages, m.hardware or {}
    mem = [s.peak_memory_bytes for s in stages]
    sizes = (m.batch_size, p.M, p.replicas) if p else (None,)
    return SweepRow(
        job=job,
        **{k: getattr(m, k) for k in AS_RUN},
        **{k: getattr(p, k) for k in AS_RUN_PIPELINE if p},
        hardware=hw.get("name") or next(iter(m.env.device_names), None),
        model=m.model.name if m.model else None,
        balance="-".join(map(str, p.balance or [])) or None if p else None,
        micro_batch=m.batch_size // p.M // p.replicas  # type: ignore[operator, union-attr]
        if m.status == "ok" and _positive(*sizes)
        else None,
        param_count=m.model.param_count if m.model else None,
        stage_busy_s=";".join(f"{s.busy_s:.6g}" for s in stages) or None,
        stage_recompute_s=";".join(f"{s.recompute_s:.6g}" for s in stages) or None,
        max_stage_memory_bytes=max(mem) if mem else None,
        stage_memory_bytes=";".join(map(str, mem)) or None,
        memory_source=stages[0].memory_source if stages else None,
        fits_memory=hw.get("fits_memory"),
        eval_accuracy=m.eval.accuracy if m.eval else None,
        final_loss=m.losses[-1] if m.losses else None,
    )


def _safe_row(job: str, m: RunMetrics) -> SweepRow:
    """``_row``, or a failed row saying why the job's metrics.json made none: one odd job never
    costs the sweep its table."""
    try:
        return _row(job, m)
    except Exception as err:  # noqa: BLE001 - any job's values, however odd, leave a row
        why = f"{type(err).__name__}: {err}".splitlines()[0]
        return SweepRow(job, "failed", error=f"its metrics.json makes no row ({why})")


def usable(r: SweepRow) -> bool:
    """An ok row whose numbers may be divided: positive K, M and throughput."""
    return r.status == "ok" and _positive(r.K, r.M, r.throughput)


def _order(v: int | None) -> float:
    return v if isinstance(v, int) else float("inf")


def series(r: SweepRow) -> tuple[str, str, str]:
    """What a row's throughput is comparable with: its model, hardware and batch mode."""
    return str(r.model), str(r.hardware), str(r.batch_mode)


def sweep_rows(sweep: Path) -> tuple[list[SweepRow], Provenance]:
    jobs = read_sweep(sweep)
    rows = sorted(
        (_safe_row(j.name, j.metrics) for j in jobs),
        key=lambda r: (_order(r.K), _order(r.M), r.job),
    )
    ok = [r for r in rows if usable(r)]
    for key in {series(r) for r in ok}:
        group = [r for r in ok if series(r) == key]
        base = min(group, key=lambda r: (r.K, r.M)).throughput
        for r in group:
            r.normalized_throughput = r.throughput / base  # type: ignore[operator]
    for r in ok:  # against K = 1 at the same M, schedule, remat and series
        same = [
            q
            for q in ok
            if (q.K, q.M, series(q), q.schedule, q.checkpoint)
            == (1, r.M, series(r), r.schedule, r.checkpoint)
        ]
        if same and r.K is not None and r.M is not None:
            r.speedup_vs_k1 = r.throughput / same[0].throughput  # type: ignore[operator]
            r.speedup_ideal = r.K * (1 - bubble_fraction(r.K, r.M))
        k1 = [q.throughput for q in ok if q.K == 1 and series(q) == series(r)]
        if k1:  # against the fastest K = 1 row of any M: what pipelining buys over not pipelining
            r.speedup_vs_best_k1 = r.throughput / max(k1)  # type: ignore[operator, type-var]
        if r.predicted_step_time_s and r.step_time_s:
            r.prediction_error = r.predicted_step_time_s / r.step_time_s - 1
    return rows, Provenance.of_jobs([j.metrics.env for j in jobs], sweep)
