"""The real cells' raw error, calibration and held-out models apart, and the raw error split in two.

Issue #38: a user sees the raw prediction (no speed probe), and a simulator judged on the models it
was calibrated on says nothing about the next one. So the real cells are split by
``measure.models.held_out`` and each set, and each of its (model, K, remat) groups, is judged on its
raw error. Per cell ``raw = engine + drift``: the probed error (what the engine pays that the
profile misses) plus the host's drift between profiling and measuring (``raw - probed``).
Written to ``heldout.csv``; the page reads it back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...measure.models import MODELS, held_out
from ...measure.simulator import CellRow
from ...typed_csv import read_csv, write_csv
from ..stats import median

MEDIAN, MAX, BIAS = 0.05, 0.10, 0.05  # issue #38: raw median |error|, max |error|, group bias
SETS = ("calibration", "held-out")
ALL = "all"  # a row over every group of its set


def set_of(model: str) -> str:
    """The set a real cell's model belongs to (``measure.models.held_out``); a model this version
    does not know (an old CSV's) counts as calibration."""
    return "held-out" if model in MODELS and held_out(model) else "calibration"


@dataclass
class HeldOutRow:
    """One set's real cells (``model`` ``all``) or one (model, K, remat) group of them: the raw
    error against the targets, the probed error beside it, and the raw error's two parts."""

    part: str  # calibration | held-out
    model: str
    K: int | None
    checkpoint: str
    cells: int
    raw_median_abs: float | None
    raw_max_abs: float | None
    raw_bias: float | None
    probed_median_abs: float
    probed_bias: float
    drift: float | None  # median over the cells of raw - probed error: the host's drift
    engine: float | None  # median over the same cells of the probed error: what the engine pays
    speed: float | None  # median speed relative to the reference (the probe's diagnostic)
    met: bool | None  # raw: the set's median and max, or the group's bias; None: no raw error


def _row(set_: str, model: str, K: int | None, ck: str, rs: Sequence[CellRow]) -> HeldOutRow:
    raw = [float(r.rel_error_raw) for r in rs if r.rel_error_raw is not None]
    probed = [float(r.rel_error) for r in rs]
    split = [
        (float(r.rel_error_raw) - float(r.rel_error), float(r.rel_error))
        for r in rs
        if r.rel_error_raw is not None and r.speed is not None
    ]
    speeds = [float(r.speed) for r in rs if r.speed is not None]
    med, top, bias = median([abs(e) for e in raw]), max(map(abs, raw), default=None), median(raw)
    if bias is None or med is None or top is None:
        met = None
    elif model == ALL:
        met = med <= MEDIAN and top <= MAX
    else:
        met = abs(bias) <= BIAS
    return HeldOutRow(
        set_, model, K, ck, len(rs), med, top, bias,
        statistics.median(abs(e) for e in probed), statistics.median(probed),
        median([d for d, _ in split]), median([e for _, e in split]), median(speeds), met,
    )  # fmt: skip


def heldout_rows(rows: Sequence[CellRow]) -> list[HeldOutRow]:
    """Per set (calibration, held-out): a row over all its real cells, then one per group."""
    real = [r for r in rows if r.kind == "real"]
    out = []
    for s in SETS:
        rs = [r for r in real if set_of(r.model) == s]
        if not rs:
            continue
        out.append(_row(s, ALL, None, ALL, rs))
        for model, K, ck in sorted({(r.model, r.K, r.checkpoint) for r in rs}):
            group = [r for r in rs if (r.model, r.K, r.checkpoint) == (model, K, ck)]
            out.append(_row(s, model, K, ck, group))
    return out


def summary(rows: Sequence[CellRow], out: Path) -> dict[str, Any]:
    """Write ``heldout.csv`` from ``rows`` into ``out``; its rows read back and, per set, its row
    over all its cells with its groups (worded by ``templates/sim.md.j2``). Nothing (``heldout``
    None) where no real cell is held out: an older grid's page is unchanged."""
    hs = heldout_rows(rows)
    if not any(h.part == "held-out" for h in hs):
        return {"heldout": None}
    write_csv(out / "heldout.csv", HeldOutRow, hs)
    hs = read_csv(out / "heldout.csv", HeldOutRow)
    sets = [[h for h in hs if h.part == s] for s in SETS]
    return {
        "heldout": {
            "median": MEDIAN, "max": MAX, "bias": BIAS, "rows": hs,
            "families": sorted({MODELS[h.model].group for h in hs
                                if h.part == "held-out" and h.model in MODELS}),
            "sets": [(rs[0], rs[1:]) for rs in sets if rs],  # (its row over all, its groups)
        }
    }  # fmt: skip
