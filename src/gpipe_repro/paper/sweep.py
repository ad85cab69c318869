"""Any sweep as a table (the demo's report, and every sweep's own): one row per job, failed ones too.

Collect: every job's ``metrics.json`` (``paper.runs``). Rows: ``SweepRow``; the throughput of each
series (one model on one hardware with one batch mode) normalised to its smallest (K, M), as the
paper's Table 2 does, and the speed-up over K = 1 at the same M beside GPipe's ideal
K·M/(M+K-1) = K·(1 - bubble) (§2.3: only the bubble is lost). Render: ``results.md`` and
``results.png`` (throughput and measured bubble against M, the ideal bubble dotted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from ..metrics.contract import RunMetrics
from .artefact import Report, SweepArtefact
from .plot import figure
from .provenance import Provenance
from .runs import read_sweep


@dataclass
class SweepRow:
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


def _row(job: str, m: RunMetrics) -> SweepRow:
    p, stages, hw = m.pipeline, m.stages, m.hardware or {}
    mem = [s.peak_memory_bytes for s in stages]
    return SweepRow(
        job=job,
        **{k: getattr(m, k) for k in AS_RUN},
        **{k: getattr(p, k) for k in AS_RUN_PIPELINE if p},
        hardware=hw.get("name") or next(iter(m.env.device_names), None),
        model=m.model.name if m.model else None,
        balance="-".join(map(str, p.balance or [])) or None if p else None,
        micro_batch=m.batch_size // p.M // p.replicas if p and m.batch_size else None,
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


def series(r: SweepRow) -> tuple[str, str, str]:
    """What a row's throughput is comparable with: its model, hardware and batch mode."""
    return str(r.model), str(r.hardware), str(r.batch_mode)


def sweep_rows(sweep: Path) -> tuple[list[SweepRow], Provenance]:
    jobs = read_sweep(sweep)
    rows = sorted(
        (_row(j.name, j.metrics) for j in jobs),
        key=lambda r: (r.K if r.K is not None else 10**9, r.M if r.M is not None else 10**9, r.job),
    )
    ok = [r for r in rows if r.status == "ok" and r.throughput]
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


FORMATS = {"throughput": "{:.1f}", "predicted_throughput": "{:.1f}", "final_loss": "{:.6f}"}
FORMATS |= dict.fromkeys(("bubble_fraction", "bubble_ideal", "eval_accuracy"), "{:.3f}")
FORMATS |= dict.fromkeys(
    ("normalized_throughput", "speedup_vs_k1", "speedup_vs_best_k1", "speedup_ideal"), "{:.3f}"
)
FORMATS["prediction_error"] = "{:+.1%}"


def _fmt(v: Any, col: str) -> str:
    if v is None:
        return "—"
    if col in ("step_time_s", "predicted_step_time_s"):
        return f"{v * 1e3:.1f} ms"
    if col == "stage_memory_bytes":
        return " / ".join(f"{int(x) / 2**20:.1f}" for x in str(v).split(";"))
    return FORMATS.get(col, "{}").format(v)


TABLE_COLS = [
    ("K", "K"),
    ("M", "M"),
    ("checkpoint", "remat"),
    ("schedule", "schedule"),
    ("source", "source"),
    ("hardware", "hardware"),
    ("batch_mode", "batch mode"),
    ("status", "status"),
    ("throughput", "samples/s"),
    ("predicted_throughput", "predicted samples/s"),
    ("prediction_error", "predicted step error"),
    ("normalized_throughput", "normalised"),
    ("speedup_vs_k1", "speed-up vs K=1"),
    ("speedup_vs_best_k1", "vs fastest K=1"),
    ("speedup_ideal", "K·M/(M+K-1)"),
    ("bubble_fraction", "bubble"),
    ("bubble_ideal", "(K-1)/(M+K-1)"),
    ("stage_memory_bytes", "memory/stage MiB"),
    ("eval_accuracy", "accuracy"),
    ("final_loss", "final loss"),
    ("error", "error"),
]


def _shown(rows: Sequence[SweepRow]) -> list[tuple[str, str]]:
    """The columns shown: the optional ones only when some row has them (a simulated sweep, a
    train.predict sweep, a batch_mode sweep)."""
    simulated = any(r.source == "simulated" for r in rows)
    optional = {
        "source": simulated,
        "hardware": simulated,
        "batch_mode": any(r.batch_mode not in (None, "fixed") for r in rows),
        **{
            c: any(getattr(r, c) is not None for r in rows)
            for c in (
                "predicted_throughput",
                "prediction_error",
                "speedup_vs_k1",
                "speedup_vs_best_k1",
                "speedup_ideal",
            )
        },
    }
    return [c for c in TABLE_COLS if optional.get(c[0], True)]


def markdown_table(rows: Sequence[SweepRow]) -> str:
    cols = _shown(rows)
    head = "| " + " | ".join(h for _, h in cols) + " |"
    body = [
        "| " + " | ".join(_fmt(getattr(r, c), c).replace("|", "/") for c, _ in cols) + " |"
        for r in rows
    ]
    return "\n".join([head, "|" + "---|" * len(cols), *body])


def checks(rows: Sequence[SweepRow]) -> list[str]:
    """GPipe's two claims read off a K x M sweep, per series with K = 1 and K > 1 rows: the deepest
    pipeline at its largest M against the fastest K = 1 row of any M; whether its speed-up over K = 1
    at the same M rises with M; and whether the final losses are bit-equal across K at each M (the
    update is synchronous, §2.2)."""
    ok = [r for r in rows if r.status == "ok" and r.throughput and r.K and r.M]
    out: list[str] = []
    for key in sorted({series(r) for r in ok}):
        group = [r for r in ok if series(r) == key]
        k1 = [r for r in group if r.K == 1]
        deep = [r for r in group if r.K != 1]
        if not k1 or not deep:
            continue
        best = max(k1, key=lambda r: r.throughput or 0.0)
        K = max(r.K for r in deep)  # type: ignore[type-var]
        line = sorted((r for r in deep if r.K == K), key=lambda r: r.M or 0)
        top = line[-1]
        out.append(
            f"- K = {K}, M = {top.M}: {top.speedup_vs_best_k1:.2f}x the fastest K = 1 row "
            f"(K = 1, M = {best.M}: {best.throughput:.1f} samples/s)"
        )
        ups = [r.speedup_vs_k1 for r in line if r.speedup_vs_k1 is not None]
        rising = all(b > a for a, b in zip(ups, ups[1:]))
        out.append(
            f"- K = {K} over K = 1 at the same M rises with M: {'yes' if rising else 'no'} ("
            + ", ".join(f"M = {r.M}: {r.speedup_vs_k1:.2f}" for r in line if r.speedup_vs_k1)
            + ")"
        )
        differ = [
            M
            for M in sorted({r.M for r in group})  # type: ignore[type-var]
            if len({r.final_loss for r in group if r.M == M}) > 1
        ]
        out.append(
            "- final losses bit-equal across K at every M: "
            + ("yes" if not differ else f"no (they differ at M = {', '.join(map(str, differ))})")
        )
    return out


def console_table(rows: Sequence[SweepRow]) -> str:
    cols = [c for c in _shown(rows) if c[0] not in ("checkpoint", "schedule")]
    cells = [[h for _, h in cols]] + [[_fmt(getattr(r, c), c)[:60] for c, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def plot(rows: Sequence[SweepRow], path: Path, title: str) -> None:
    with figure(path, 1, 2, figsize=(10, 3.8)) as (fig, axes):
        ok = [r for r in rows if r.status == "ok"]
        keys = sorted({series(r) for r in ok})
        for key in keys:
            tag = "" if len(keys) == 1 else " " + "/".join(key[1:])
            for K in sorted({r.K for r in ok if series(r) == key}):  # type: ignore[type-var]
                rs = sorted((r for r in ok if r.K == K and series(r) == key), key=lambda r: r.M)  # type: ignore[arg-type, return-value]
                what = "simulated" if rs[0].source == "simulated" else "measured"
                Ms = [r.M for r in rs]
                axes[0].plot(Ms, [r.throughput for r in rs], "o-", label=f"K={K}{tag}")
                axes[1].plot(Ms, [r.bubble_fraction for r in rs], "o-", label=f"K={K}{tag} {what}")
                axes[1].plot(Ms, [r.bubble_ideal for r in rs], "k:", alpha=0.5)
        axes[0].set(
            xlabel="micro-batches M", ylabel="samples / s", title="throughput", xscale="log"
        )
        axes[1].set(
            xlabel="micro-batches M",
            ylabel="idle share",
            title="bubble (dotted: (K-1)/(M+K-1))",
            xscale="log",
        )
        for ax in axes:
            Ms = sorted({r.M for r in ok})  # type: ignore[type-var]
            if Ms:
                ax.set_xticks(Ms, [str(m) for m in Ms])
                ax.minorticks_off()
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        fig.suptitle(title)


def page(name: str, rows: Sequence[SweepRow], prov: Provenance) -> str:
    """The sweep's page: the provenance, the table, GPipe's claims read off it."""
    head = "\n".join(prov.page(name))
    found = checks(rows)
    tail = "\n\n## GPipe's claims in this sweep\n\n" + "\n".join(found) if found else ""
    return f"{head}\n\n{markdown_table(rows)}\n{tail}\n"


class Sweep(SweepArtefact[SweepRow]):
    """The table of one experiment's sweep, published to ``reports/<experiment>/``."""

    def __init__(self, name: str, about: str = "") -> None:
        super().__init__(
            name,
            SweepRow,
            about or f"the sweep of experiment={name} as a table",
            lambda sweep: Report(*sweep_rows(sweep)),
            partial(page, name),
            partial(plot, title=name),
            page="results",
        )
