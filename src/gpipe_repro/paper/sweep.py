"""Any sweep as a table (the demo's report, and every sweep's own): one row per job, failed ones too.

Collect: ``paper.sweep_rows`` (every job's ``metrics.json`` into ``SweepRow``s, normalised and set
against K = 1 and GPipe's ideal). Render: ``templates/sweep.md.j2`` (``results.md``: it opens with the
verdicts of the claims judged on this sweep — the demo's, ``paper.claims.algorithm`` — or, for one
sweep of a table, where that table judges them; the table through ``markdown.table``; GPipe's claims
read off the sweep) and ``results.png`` (throughput and measured bubble against M, the ideal bubble
dotted).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import UserError
from .artefact import Report, SweepArtefact
from .claims import LEAD, answers, of
from .markdown import DASH, mib, ms, table
from .plot import figure
from .provenance import Provenance
from .sweep_rows import SweepRow, series, sweep_rows, usable
from .template import render, words

FORMATS = {"throughput": "{:.1f}", "predicted_throughput": "{:.1f}", "final_loss": "{:.6f}"}
FORMATS |= dict.fromkeys(("bubble_fraction", "bubble_ideal", "eval_accuracy"), "{:.3f}")
FORMATS |= dict.fromkeys(
    ("normalized_throughput", "speedup_vs_k1", "speedup_vs_best_k1", "speedup_ideal"), "{:.3f}"
)
FORMATS["prediction_error"] = "{:+.1%}"


def _fmt(v: Any, col: str) -> str:
    if v is None:
        return DASH
    if col in ("step_time_s", "predicted_step_time_s"):
        return f"{ms(v)} ms"
    if col == "stage_memory_bytes":
        return " / ".join(mib(int(x), 1) for x in str(v).split(";"))
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
    """The sweep's table (``markdown.table``), a ``|`` in a cell (an error's text) made a ``/``."""
    cols = _shown(rows)
    cells = [[_fmt(getattr(r, c), c).replace("|", "/") for c, _ in cols] for r in rows]
    return table([h for _, h in cols], cells)


def checks(rows: Sequence[SweepRow]) -> list[str]:
    """GPipe's two claims read off a K x M sweep, in words (``templates/sweep_lines.md.j2``),
    per series with K = 1 and K > 1 rows: the deepest pipeline at its largest M against the fastest
    K = 1 row of any M; whether its speed-up over K = 1 at the same M rises with M; and whether the
    final losses are bit-equal across K at each M (the update is synchronous, §2.2)."""
    ok, out = [r for r in rows if usable(r)], []
    for key in sorted({series(r) for r in ok}):
        group = [r for r in ok if series(r) == key]
        k1 = [r for r in group if r.K == 1]
        deep = [r for r in group if r.K != 1]
        if not k1 or not deep:
            continue
        K = max(r.K for r in deep)  # type: ignore[type-var]
        line = sorted((r for r in deep if r.K == K), key=lambda r: r.M or 0)
        ups = [r.speedup_vs_k1 for r in line if r.speedup_vs_k1 is not None]
        out.append({
            "K": K, "line": line, "top": line[-1],
            "best": max(k1, key=lambda r: r.throughput or 0.0),
            "rising": all(b > a for a, b in zip(ups, ups[1:])),
            "differ": [M for M in sorted({r.M for r in group})  # type: ignore[type-var]
                       if len({r.final_loss for r in group if r.M == M}) > 1],
        })  # fmt: skip
    return words("sweep_lines", "checks", series=out).splitlines()


# The console's columns, most wanted first, with short headings: as many as fit the width; the error
# last, cut to what is left (the files hold every column in full).
CONSOLE = {
    "K": "K",
    "M": "M",
    "status": "status",
    "throughput": "samples/s",
    "speedup_vs_k1": "vs K=1",
    "speedup_ideal": "ideal",
    "bubble_fraction": "bubble",
    "eval_accuracy": "accuracy",
    "final_loss": "final loss",
    "prediction_error": "pred. err",
    "source": "source",
    "hardware": "hardware",
    "batch_mode": "batch",
    "bubble_ideal": "ideal bubble",
    "speedup_vs_best_k1": "vs best K=1",
    "normalized_throughput": "normalised",
}
CONSOLE_WIDTH = 100
_GAP = 2
_MIN_ERROR = 24  # an error column narrower than this says nothing


def console_table(rows: Sequence[SweepRow], width: int = CONSOLE_WIDTH) -> str:
    """The sweep on the console: the columns of ``CONSOLE`` that ``results.md`` shows, in its order,
    as many as fit ``width`` characters, and the error column cut to the rest."""
    shown = {c for c, _ in _shown(rows)}
    cells = {c: [_fmt(getattr(r, c), c) for r in rows] for c in CONSOLE if c in shown}
    need = {c: max(len(CONSOLE[c]), *map(len, v)) for c, v in cells.items()}
    errors = [_fmt(r.error, "error") if r.error else "" for r in rows]
    reserve = _MIN_ERROR + _GAP if any(errors) else 0
    cols: list[str] = []
    for c in cells:  # most wanted first
        if sum(need[k] + _GAP for k in cols) + need[c] + reserve <= width:
            cols.append(c)
    order = [c for c, _ in TABLE_COLS if c in cols]
    used = sum(need[c] + _GAP for c in order)
    lines = []
    for i in range(-1, len(rows)):
        vals = [CONSOLE[c] if i < 0 else cells[c][i] for c in order]
        line = "".join(v.ljust(need[c] + _GAP) for v, c in zip(vals, order))
        if reserve:
            text = "error" if i < 0 else errors[i]
            room = width - used
            line += text if len(text) <= room else text[: room - 1] + "…"
        lines.append(line.rstrip())
    return "\n".join(lines)


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def plot(rows: Sequence[SweepRow], path: Path, title: str) -> None:
    with figure(path, 1, 2, figsize=(10, 3.8)) as (fig, axes):
        ok = [r for r in rows if usable(r)]
        keys = sorted({series(r) for r in ok})
        for key in keys:
            tag = "" if len(keys) == 1 else " " + "/".join(key[1:])
            for K in sorted({r.K for r in ok if series(r) == key}):  # type: ignore[type-var]
                rs = sorted((r for r in ok if r.K == K and series(r) == key), key=lambda r: r.M)  # type: ignore[arg-type, return-value]
                what = "simulated" if rs[0].source == "simulated" else "measured"
                Ms = [r.M for r in rs]
                axes[0].plot(Ms, [_nan(r.throughput) for r in rs], "o-", label=f"K={K}{tag}")
                bubbles = [_nan(r.bubble_fraction) for r in rs]
                axes[1].plot(Ms, bubbles, "o-", label=f"K={K}{tag} {what}")
                axes[1].plot(Ms, [_nan(r.bubble_ideal) for r in rs], "k:", alpha=0.5)
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


def _parent(name: str) -> str | None:
    """The table a sweep is one of (``table2_amoebanet`` -> ``table2``), if it judges claims."""
    parent = name.split("_")[0]
    return parent if parent != name and of(parent) else None


def page(name: str, rows: Sequence[SweepRow], prov: Provenance, out: Path) -> str:
    """The sweep's page: its answer (the verdicts of the claims judged on it, or where its table
    judges them), the provenance, the table, GPipe's claims read off it."""
    parent = _parent(name)
    judged = [] if parent else answers(name, out)
    lead = words("sweep_lines", "lead", parent=parent) if parent else LEAD if judged else ""
    return render(
        "sweep", prov, name, judged, lead, table=markdown_table(rows), checks=checks(rows)
    )


def _collect(sweep: Path) -> Report[SweepRow]:
    """The report of a sweep folder (one folder per job); a single run's folder, or a folder with
    no job, is one line saying what it is."""
    if (sweep / "metrics.json").exists():
        raise UserError(
            f"--from {sweep} is one run's folder ({sweep / 'metrics.json'}), not a sweep's: a "
            "sweep folder (gpipe-run -m ...) holds a folder per job; give that folder"
        )
    if not any(sweep.glob("*/metrics.json")):
        raise UserError(
            f"--from {sweep} holds no job (no <job>/metrics.json in it): give the folder of a "
            "sweep (gpipe-run -m ...), or a table's results.csv"
        )
    return Report(*sweep_rows(sweep))


class Sweep(SweepArtefact[SweepRow]):
    """The table of one experiment's sweep, published to ``reports/<experiment>/`` by its make
    target (``publisher``; the demo's: ``make demo-publish``). ``sweep``: any sweep's table, never
    published."""

    def __init__(self, name: str, about: str = "") -> None:
        super().__init__(
            name,
            SweepRow,
            about or f"the sweep of experiment={name} as a table",
            _collect,
            partial(page, name),
            partial(plot, title=name),
            page="results",
        )
        self.publisher: str | None = {"demo": "make demo-publish", "sweep": None}.get(
            name, f"make {name}"
        )
        if name == "sweep":
            self.command = "gpipe-run -m ..."
