"""Tables 2 and 3's one normalisation, the paper's, and the decomposition of a cell against it.

The paper normalises each model's throughput to its K = 2, M = 1 cell (Table 2) or its K = 2 cell
(Table 3, M = 32). So does every series here: its **reference** is the paper's cell wherever that cell
ran, whether its batch fits the device's memory or not (a cell that does not fit is flagged *(no
fit)*), else the series' first cell that ran, which its page names. The paper's numbers are
re-normalised to that same cell before any ratio. ``build`` applies the rule to collected cells;
``renormalise`` to rows read back from a CSV made under an earlier rule (the first cell whose batch
fits), exactly: each factor is a cell's part over the reference's, so against a new reference r' it
is divided by r''s own (a no-op on a CSV made under this rule).

With ``b`` the batch, ``step`` the step time, ``busy_k`` stage k's compute time in a step, ``c =
sum(busy) / b`` and ``u = sum(busy) / (K * step)``, the throughput is ``b / step = K * u / c``, so
against the reference cell (r) exactly ``normalised = bound x balance x overlap x transfers x
efficiency``, each (this cell's) / (r's):

- ``bound`` = K (1 - bubble), bubble = (K - 1)/(M + K - 1): the fill-drain bubble alone (§2.3);
- ``balance`` = mean busy / max busy: the slowest stage's extra work;
- ``overlap`` = o = (M + K - 1) w / (M w + (K - 1)(w - r)), w and r the slowest stage's work and
  recompute per micro-batch: the early recompute (§2.3) shortens the drain; 1 without recompute time;
- ``transfers`` = u / ((1 - bubble) * mean/max * o): the rest — transfers, waits, the optimiser
  step and per-step overhead;
- ``efficiency`` = c_r / c: compute per sample (per-micro-batch efficiency).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from ..engine.schedule import bubble_fraction
from ..studies.published import throughput
from ..studies.throughput_rows import Cell, ThroughputRow
from .template import words

FACTORS = ("bound", "balance", "overlap", "transfers", "efficiency")
PAPER_REF = {2: (2, 1), 3: (2, 32)}  # the paper's normaliser per table
T = TypeVar("T")


def series(r: ThroughputRow) -> tuple[str, str, str, str]:
    """What a row's throughput is normalised within: its model, source, hardware and batch mode."""
    return r.model, r.source, r.hardware, r.batch_mode


def paper_design(r: ThroughputRow) -> bool:
    """Whether a row's series is the paper's design: measured on K GPUs, or the batch adjusted to
    fit memory ("batch size was adjusted to fit memory if necessary")."""
    return r.source == "measured" or r.batch_mode == "fit"


def _parts(c: Cell) -> tuple[float, float, float, float, float]:
    """(schedule share 1 - bubble, balance mean/max, early-recompute overlap o, the rest, compute
    per sample) of one cell."""
    r = c.row
    sched = 1 - bubble_fraction(r.K, r.M)
    step, batch = float(r.step_s or 0), float(r.batch_size or 1)
    if len(c.busy) != r.K or max(c.busy) <= 0:
        return sched, 1.0, 1.0, 1.0, step / batch
    bal = statistics.fmean(c.busy) / max(c.busy)
    slow = c.busy.index(max(c.busy))
    w = c.busy[slow] / r.M
    rec = c.recompute[slow] / r.M if len(c.recompute) == r.K else 0.0
    o = (r.M + r.K - 1) * w / (r.M * w + (r.K - 1) * (w - rec))
    u = sum(c.busy) / (r.K * step)
    return sched, bal, o, u / (sched * bal * o), sum(c.busy) / batch


def decompose(c: Cell, ref: Cell) -> dict[str, float]:
    """``normalised = bound x balance x overlap x transfers x efficiency`` against the reference."""
    s, b, o, t, per = _parts(c)
    s0, b0, o0, t0, per0 = _parts(ref)
    return dict(
        zip(FACTORS, ((c.row.K * s) / (ref.row.K * s0), b / b0, o / o0, t / t0, per0 / per))
    )


def pick(items: Sequence[T], key: Callable[[T], tuple[int, int]], ran: Callable[[T], bool],
         paper_ref: tuple[int, int]) -> T | None:  # fmt: skip
    """The reference among a series' ``items``: the paper's cell if it ran, else the first that ran
    (by K, then M); None when none ran."""
    done = sorted((i for i in items if ran(i)), key=key)
    return next((i for i in done if key(i) == paper_ref), done[0] if done else None)


def why(
    r: ThroughputRow, ref: ThroughputRow, f: dict[str, float], paper_ref: tuple[int, int]
) -> str:
    """A normalised cell's sentence from the numbers (``templates/throughput_lines.md.j2``): what it
    is — the planner's pick, a batch that does not fit, a series whose paper's reference did not
    run —, how far the bubble bound goes, what moves us off it (each factor 3% or more off 1, the
    largest first) and the paper (re-normalised to our reference cell)."""
    size = {k: abs(math.log(max(f[k], 1e-9))) for k in FACTORS[1:]}  # every factor but the bound
    movers = [k for k in sorted(size, key=lambda k: -size[k]) if size[k] >= 0.03]
    return words("throughput_lines", "why", r=r, ref=ref, f=f, movers=movers, paper_ref=paper_ref)


def _normalise(
    r: ThroughputRow,
    ref: ThroughputRow,
    normalized: float,
    f: dict[str, float],
    paper_ref: tuple[int, int],
) -> ThroughputRow:
    """``r`` (a copy) against ``ref``: its reference, normalised value, ratio, factors, sentence."""
    r.reference = f"K={ref.K}, M={ref.M}"
    r.normalized = normalized
    r.ratio = normalized / r.paper_normalized if r.paper_normalized else None
    r.bound, r.balance, r.overlap, r.transfers, r.efficiency = (f[k] for k in FACTORS)
    r.why = why(r, ref, f, paper_ref)
    return r


def build(cells: Sequence[Cell], table: int) -> list[ThroughputRow]:
    """Every cell normalised within its series to the paper's reference, with the paper's number
    re-normalised to the same cell, the ratio and the reasons."""
    paper_ref, out = PAPER_REF[table], []
    for key in sorted({series(c.row) for c in cells}):
        cs = [c for c in cells if series(c.row) == key]
        ref = pick(cs, lambda c: (c.row.K, c.row.M), lambda c: c.ok, paper_ref)
        printed = throughput(table, key[0])
        base = printed.get((ref.row.K, ref.row.M)) if ref else None
        for c in sorted(cs, key=lambda c: (c.row.M, c.row.K)):
            paper = printed.get((c.row.K, c.row.M))
            r = replace(c.row, paper_normalized=paper / base if paper and base else None)
            if ref is None or not c.ok:
                out.append(replace(r, why=f"failed: {c.error}" if not c.ok else "no cell ran"))
                continue
            normalized = float(r.throughput or 0) / float(ref.row.throughput or 1)
            out.append(_normalise(r, ref.row, normalized, decompose(c, ref), paper_ref))
    return out


def renormalise(rows: Sequence[ThroughputRow]) -> list[ThroughputRow]:
    """Rows read back from a CSV, normalised by ``build``'s rule (a no-op on rows it made)."""
    if not rows:
        return []
    table = rows[0].table
    paper_ref = PAPER_REF[table]
    done = {id(r): r for r in rows}
    for key in dict.fromkeys(series(r) for r in rows):
        rs = [r for r in rows if series(r) == key]
        ref = pick(rs, lambda r: (r.K, r.M), lambda r: r.normalized is not None, paper_ref)
        if ref is None:
            continue
        printed = throughput(table, key[0])
        base = printed.get((ref.K, ref.M))
        old = {k: float(getattr(ref, k) or 1.0) for k in FACTORS}
        old_norm = float(ref.normalized or 1.0)
        for r in rs:
            paper = printed.get((r.K, r.M))
            new = replace(r, paper_normalized=paper / base if paper and base else None)
            if r.normalized is not None:
                f = {k: float(getattr(r, k) or 1.0) / old[k] for k in FACTORS}
                new = _normalise(new, ref, r.normalized / old_norm, f, paper_ref)
            done[id(r)] = new
    return [done[id(r)] for r in rows]
