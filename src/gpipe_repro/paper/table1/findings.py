"""What Table 1's page says, from the rows of its CSVs alone (``templates/table1.md.j2`` words it):
the tables, §3's headline ratios, the CPU allocator against the plan, where and why ours differ from
the paper, and the Naive-1 gap under an XLA-like accounting.

The paper's numbers come from ``studies.published`` in the unit each half of its table uses
(``numbers.UNITS``), never from the CSV's ``paper_*`` columns (an older CSV holds 10^9 for both).
A row of a CSV from before the accounting column is ``eager``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ...memory.breakdown import FUSED_AWAY, fused_away
from ...studies.published import QUOTES, UNITS, quote
from ...studies.table1 import AllocRow, ResultRow, SavedRow
from ..verdict import ratio as judge  # the rule the scorecard applies

BYTES_PER_PARAMETER = 12  # fp32 weights + gradients + RMSProp's one slot (GPipe §3: RMSProp)
# Our rows, in the order the page shows them: (precision, accounting).
KINDS = (("fp32", "eager"), ("bf16", "eager"), ("fp32", "xla-like"), ("bf16", "xla-like"))

HALVES = (
    ("amoebanet_d", "AmoebaNet-D, 224×224", "(L, D)"),
    ("transformer_lm", "Transformer-L, 1024-token sequences", "L"),
)


def accounting(r: ResultRow) -> str:
    return r.accounting or "eager"


def kind(r: ResultRow) -> tuple[str, str]:
    return r.precision, accounting(r)


def kind_label(precision: str, acct: str) -> str:
    return precision + (", XLA-like" if acct == "xla-like" else "")


def label(r: ResultRow) -> str:
    """A row's precision and accounting, as the page names them."""
    return kind_label(*kind(r))


def paper(model: str, column: str, what: str) -> float:
    """The paper's number in bytes (memory) or parameters (``studies.published``)."""
    return quote(1, f"{model} {column}", what).value


def halves(rs: Sequence[ResultRow]) -> list[dict[str, Any]]:
    """Per model: its title, its unit, its rows and ours per column in ``KINDS``' order (the page
    puts the paper's row before them)."""
    out = []
    for model, title, unit in HALVES:
        sub = [r for r in rs if r.model == model]
        if sub:
            columns = {
                col: sorted((r for r in sub if r.column == col), key=lambda r: KINDS.index(kind(r)))
                for col in dict.fromkeys(r.column for r in sub)
            }
            out.append(
                {"model": model, "title": title, "unit": unit, "rows": sub, "columns": columns}
            )
    return out


@dataclass
class Ratio:
    """One of §3's headline ratios: the largest model of a column over the largest of Naive-1."""

    note: str  # the paper's words ("remat alone", ...)
    model: str
    column: str
    printed: float  # as §3 prints it
    from_table: float  # the same from the paper's Table 1 parameter counts
    ours: dict[tuple[str, str], float]  # per (precision, accounting) that has both columns

    @property
    def name(self) -> str:
        return f"{self.note}: {self.model} {self.column} / Naive-1"

    def verdict(self, k: tuple[str, str]) -> str:
        """Ours of kind ``k`` against the printed ratio: rule *ratio* of ``paper.verdict``."""
        return judge(self.ours[k], self.printed, "simulated")


def ratios(rs: Sequence[ResultRow]) -> list[Ratio]:
    """§3's headline ratios computed the way the paper did — the largest model that fits the
    column over the largest that fits Naive-1 (one accelerator, no GPipe) —, ours per precision
    and accounting."""
    out = []
    for q in (q for q in QUOTES if q.table == 1 and q.row == "ratio"):
        model, column = q.column.split()
        by = {(r.column, kind(r)): r.largest_param_count for r in rs if r.model == model}
        ours = {}
        for k in KINDS:
            top, base = by.get((column, k)), by.get(("Naive-1", k))
            if top and base:
                ours[k] = top / base
        table = paper(model, column, "parameters") / paper(model, "Naive-1", "parameters")
        out.append(Ratio(str(q.note), model, column, q.value, table, ours))
    return out


def units_text(tol: float = 0.01) -> dict[str, Any]:
    """Which of the paper's parameter-memory figures (in its unit) are ``BYTES_PER_PARAMETER`` x its
    parameter count within ``tol``, and the others."""
    rows = []
    for q in (q for q in QUOTES if q.table == 1 and q.column == "parameter memory"):
        model, column = q.row.split()
        rows.append(
            (model, column, q.value / (BYTES_PER_PARAMETER * paper(model, column, "parameters")))
        )
    return {
        "n": len(rows),
        "same": sum(abs(x - 1) <= tol for _, _, x in rows),
        "tol": tol,
        "others": [(m, c, x) for m, c, x in rows if abs(x - 1) > tol],  # the page words them
        "units": UNITS,  # bytes per unit of each half
    }


def remains(
    saved: Sequence[SavedRow], model: str, precision: str, share: float = 0.8
) -> tuple[list[SavedRow], int]:
    """The largest saved-tensor groups of ``model``'s Naive-1 column that together hold ``share`` of
    its saved bytes, and the total."""
    groups = sorted(
        (g for g in saved if g.model == model and g.precision == precision), key=lambda g: -g.bytes
    )
    total = sum(g.bytes for g in groups)
    before = accumulate((g.bytes for g in groups), initial=0)  # the bytes of the larger groups
    return [g for g, acc in zip(groups, before) if acc < share * total], total


def _pact(r: ResultRow) -> float:
    return paper(r.model, r.column, "activation memory")


def _pcount(r: ResultRow) -> float:
    return paper(r.model, r.column, "parameters")


def _eager(rs: Sequence[ResultRow]) -> list[ResultRow]:
    return [r for r in rs if accounting(r) == "eager"]


def _naive(rs: Sequence[ResultRow], saved: Sequence[SavedRow], model: str) -> dict[str, Any] | None:
    """A model's Naive-1 gap to the paper at both precisions, and what remains in bf16."""
    by = {r.precision: r for r in _eager(rs) if r.model == model and r.column == "Naive-1"}
    if not {"fp32", "bf16"} <= set(by):
        return None
    f, b = by["fp32"], by["bf16"]
    pact = _pact(f)
    gap = f.activation_bytes - pact
    top, total = remains(saved, model, "bf16")
    kept = [
        g
        for g in saved
        if g.model == model and g.precision == "bf16" and g.dtype not in ("bfloat16", "float16")
        if g.bytes > 0
    ]
    return {
        "model": model, "fp32": f, "bf16": b, "paper": pact, "count": _pcount(f),
        "closed": (f.activation_bytes - b.activation_bytes) / gap if gap > 0 else 0.0,
        "total": total,
        "remains": top,
        "kept": sum(g.bytes for g in kept),
        "kept_dtypes": sorted({g.dtype for g in kept}),
        "kept_top": sorted(kept, key=lambda g: -g.bytes)[:3],
    }  # fmt: skip


def _by_kind(
    rs: Sequence[ResultRow], keep: Callable[[ResultRow], Any]
) -> list[tuple[str, list[ResultRow]]]:
    """Per kind with rows that ``keep`` keeps: its label and those rows (the page words them)."""
    by = [(kind_label(*k), [r for r in rs if kind(r) == k and keep(r)]) for k in KINDS]
    return [(label, mine) for label, mine in by if mine]


def why(rs: Sequence[ResultRow], saved: Sequence[SavedRow]) -> dict[str, Any]:
    """Where and why ours differ from the paper, as numbers the page words."""
    f32 = [r for r in _eager(rs) if r.precision == "fp32"]
    worst = max(f32, key=lambda r: abs(r.param_count / _pcount(r) - 1))
    return {
        "params": {
            "gap": max(abs(r.param_count / _pcount(r) - 1) for r in f32),
            "worst": worst, "paper": _pcount(worst),
        },
        "units": units_text(),
        "naive": [n for model in dict.fromkeys(r.model for r in rs) if (n := _naive(rs, saved, model))],
        "remat": _by_kind(rs, lambda r: r.column != "Naive-1"), "paper": paper,
        "copies": _weight_copies(_eager(rs)),
        "largest": _by_kind(rs, lambda r: r.largest_param_count),
    }  # fmt: skip


def _weight_copies(rs: Sequence[ResultRow]) -> dict[str, Any] | None:
    """bf16's own cost: autocast's bf16 copies of a stage's weights, saved by every graph alive;
    the bf16 rows that have them, and those paired with an fp32 row they exceed."""
    bf = [r for r in rs if r.precision == "bf16" and r.weight_copy_bytes]
    f32 = {(r.model, r.column): r for r in rs if r.precision == "fp32"}
    pairs = [(r, f32.get((r.model, r.column))) for r in bf]
    worse = [(r, f) for r, f in pairs if f and r.activation_bytes > f.activation_bytes]
    return {"each": bf, "worse": worse} if bf else None


def fused(rs: Sequence[ResultRow], saved: Sequence[SavedRow]) -> list[dict[str, Any]]:
    """The Naive-1 gap under the XLA-like accounting mode (``memory.breakdown.FUSED_AWAY``), per
    model and precision, from the saved tensors' breakdown: the bytes each rule drops, what is
    left, the share of the gap closed and the largest group kept."""
    out = []
    for r in (r for r in _eager(rs) if r.column == "Naive-1"):
        groups = [g for g in saved if g.model == r.model and g.precision == r.precision]
        if not groups:
            continue
        drops: dict[str, int] = {}
        for g in groups:
            if (reason := fused_away(g.kind, g.dtype)) is not None:
                k = reason.split(":")[0]
                drops[k] = drops.get(k, 0) + g.bytes
        total, pact = sum(g.bytes for g in groups), _pact(r)
        left = total - sum(drops.values())
        kept = [g for g in groups if fused_away(g.kind, g.dtype) is None]
        out.append({
            "row": r, "total": total, "drops": drops, "left": left, "paper": pact,
            "closed": (total - left) / (total - pact) if total > pact else 0.0,
            "kept": max(kept, key=lambda g: g.bytes, default=None),
        })  # fmt: skip
    return out


def size_steps(r: ResultRow) -> int | None:
    """The largest model that fits against the paper's size, in search steps (AmoebaNet: D in 8s;
    Transformer: L); None where none fits."""
    if r.model == "amoebanet_d":
        return None if r.largest_D is None else (r.largest_D - (r.D or 0)) // 8
    return None if r.largest_L is None else r.largest_L - r.L


def summary(
    rs: Sequence[ResultRow], saved: Sequence[SavedRow], alloc: Sequence[AllocRow]
) -> dict[str, Any]:
    """Everything the page says (module doc)."""
    ratio_rows = ratios(rs)
    worst = max(alloc, key=lambda a: abs(a.error)) if alloc else None
    return {
        "planning_s": sum(r.seconds or 0 for r in rs),
        "allocator_s": sum(a.seconds or 0 for a in alloc),
        "halves": halves(rs),
        "label": label,
        "ratios": ratio_rows,
        "kinds": {k: kind_label(*k) for k in KINDS if any(k in r.ours for r in ratio_rows)},
        "allocator": list(alloc),
        "allocator_worst": worst,
        **why(rs, saved),
        "rules": FUSED_AWAY,
        "fused": fused(rs, saved),
        "naive_rows": [r for r in rs if r.column == "Naive-1"],
        "size_steps": size_steps,
        "has_xla": any(accounting(r) == "xla-like" for r in rs),
    }
