"""What Table 1's page says, from the rows of its CSVs alone: the tables, §3's headline ratios, the
CPU allocator against the plan, where and why ours differ from the paper, and the Naive-1 gap under
an XLA-like accounting mode (``templates/table1.md.j2`` words them). No number is typed by hand: each
is read or computed from the rows, so ``--from`` the CSV regenerates the same page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...memory.breakdown import FUSED_AWAY, fused_away
from ..markdown import gib, pct, ratio
from ..numbers import QUOTES, quote
from .planned import AllocRow, ResultRow, SavedRow

# Readable names for the (operation, dtype) groups of ``saved.csv`` (``memory.breakdown``).
KIND_NAMES = {
    "Relu": "ReLU outputs",
    "Convolution": "convolution outputs (BatchNorm inputs)",
    "ConstantPadNd": "padded pooling inputs",
    "AvgPool2D": "average-pool outputs",
    "Cat": "concatenations",
    "LogSoftmax": "log-probabilities",
    "Addmm": "linear outputs",
    "Add": "sums (residuals, biases)",
    "NativeLayerNorm": "LayerNorm outputs",
    "Mul": "products",
    "ToCopy": "casts",
    "weight copy": "autocast's weight copies",
    "input": "input",
    "output": "output (kept for its gradient)",
}
HALVES = (
    ("amoebanet_d", "AmoebaNet-D, 224×224", "(L, D)"),
    ("transformer_lm", "Transformer-L, 1024-token sequences", "L"),
)


def _count(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _size(r: ResultRow, L: str = "L", D: str = "D") -> str:
    return f"({getattr(r, L)}, {getattr(r, D)})" if r.model == "amoebanet_d" else str(getattr(r, L))


def _kind(g: SavedRow) -> str:
    if g.kind == "internal":
        what = "indices" if "int" in g.dtype else "statistics"
        return f"{g.layer_type} {g.dtype} tensors outside autograd ({what})"
    return f"{g.layer_type} {KIND_NAMES.get(g.kind, g.kind)} ({g.dtype})"


def _short(r: ResultRow) -> str:
    return f"{r.column} {r.model.split('_')[0]}"


def halves(rs: Sequence[ResultRow]) -> list[dict[str, Any]]:
    """Per model: its title, the paper's row and ours at each precision per column, the notes."""
    out = []
    for model, title, unit in HALVES:
        sub = [r for r in rs if r.model == model]
        if not sub:
            continue
        cells = []
        for col in dict.fromkeys(r.column for r in sub):
            p = [r for r in sub if r.column == col][0]
            paper = _count(p.paper_param_count)
            cells.append(
                [col, "paper", _size(p), paper, gib(p.paper_param_memory_bytes),
                 gib(p.paper_activation_bytes), "—", "—", f"{_size(p)}: {paper}", "—"]
            )  # fmt: skip
            for r in (r for r in sub if r.column == col):
                fit = (
                    f"{_size(r, 'largest_L', 'largest_D')}: {_count(r.largest_param_count)} "
                    f"({ratio(r.largest_param_count, r.paper_param_count)})"
                    if r.largest_L
                    else "none"
                )
                cells.append(
                    [col, r.precision, _size(r),
                     f"{_count(r.param_count)} ({ratio(r.param_count, r.paper_param_count)})",
                     f"{gib(r.param_memory_bytes)} "
                     f"({ratio(r.param_memory_bytes, r.paper_param_memory_bytes)})",
                     f"{gib(r.activation_bytes)} "
                     f"({ratio(r.activation_bytes, r.paper_activation_bytes)})",
                     f"{gib(r.max_stage_activation_bytes)} / {gib(r.max_stage_total_bytes)}",
                     "yes" if r.fits else "**no**", fit, f"{r.M}, {r.schedule}, {r.checkpoint}"]
                )  # fmt: skip
        out.append(
            {
                "title": f"{title}, batch {sub[0].batch}, {sub[0].budget_bytes / 2**30:g} GiB "
                "per accelerator",
                "unit": unit,
                "cells": cells,
                "notes": [f"{r.column}, {r.precision}: {r.note}" for r in sub if r.note],
            }
        )
    return out


def headline(rs: Sequence[ResultRow]) -> list[list[str]]:
    """§3's headline ratios (the largest model of a column over Naive-1's), ours beside the paper's."""
    out = []
    for q in (q for q in QUOTES if q.table == 1 and q.row == "ratio"):
        model, column = q.column.split()
        by = {(r.column, r.precision): r.largest_param_count for r in rs if r.model == model}
        paper = (
            quote(1, f"{model} {column}", "parameters").value
            / quote(1, f"{model} Naive-1", "parameters").value
        )
        ours = [ratio(by.get((column, p)), by.get(("Naive-1", p))) for p in ("fp32", "bf16")]
        out.append(
            [f"{q.note}: {model} {column} / Naive-1", f"{q.value:g}×", f"{paper:.1f}×", *ours]
        )
    return out


def allocator_cells(alloc: Sequence[AllocRow]) -> list[list[Any]]:
    """The planner's per-stage peak against the CPU allocator's measured peak."""
    return [
        [a.K, a.stage, a.checkpoint, f"{a.state_bytes / 2**20:.2f} MiB",
         f"{a.planned_bytes / 2**20:.2f} MiB", f"{a.measured_bytes / 2**20:.2f} MiB",
         pct(a.error, 1, True)]
        for a in alloc
    ]  # fmt: skip


def remains(
    saved: Sequence[SavedRow], model: str, precision: str, share: float = 0.8
) -> tuple[list[SavedRow], int]:
    """The largest saved-tensor groups of ``model``'s Naive-1 column that together hold ``share`` of
    its saved bytes, and the total."""
    groups = sorted(
        (g for g in saved if g.model == model and g.precision == precision), key=lambda g: -g.bytes
    )
    total = sum(g.bytes for g in groups)
    top, acc = [], 0
    for g in groups:
        if acc >= share * total:
            break
        top.append(g)
        acc += g.bytes
    return top, total


def _naive(rs: Sequence[ResultRow], saved: Sequence[SavedRow], model: str) -> dict[str, Any] | None:
    """A model's Naive-1 gap to the paper at both precisions, and what remains in bf16."""
    by = {r.precision: r for r in rs if r.model == model and r.column == "Naive-1"}
    if not {"fp32", "bf16"} <= set(by):
        return None
    f, b = by["fp32"], by["bf16"]
    gap = f.activation_bytes - f.paper_activation_bytes
    top, total = remains(saved, model, "bf16")
    kept = [
        g
        for g in saved
        if g.model == model and g.precision == "bf16" and g.dtype not in ("bfloat16", "float16")
        if g.bytes > 0
    ]
    return {
        "model": model, "fp32": f.activation_bytes, "bf16": b.activation_bytes,
        "paper": f.paper_activation_bytes,
        "fp32_ratio": ratio(f.activation_bytes, f.paper_activation_bytes),
        "bf16_ratio": ratio(b.activation_bytes, f.paper_activation_bytes),
        "closed": (f.activation_bytes - b.activation_bytes) / gap if gap > 0 else 0.0,
        "fp32_largest": ratio(f.largest_param_count, f.paper_param_count),
        "bf16_largest": ratio(b.largest_param_count, b.paper_param_count),
        "total": total,
        "remains": "; ".join(f"{_kind(g)} {gib(g.bytes)} ({pct(g.bytes / total, 0)})" for g in top)
        if total else "",
        "kept": sum(g.bytes for g in kept),
        "kept_dtypes": ", ".join(sorted({f"{g.dtype}" for g in kept})),
        "kept_top": "; ".join(
            f"{_kind(g)} {gib(g.bytes)}" for g in sorted(kept, key=lambda g: -g.bytes)[:3]
        ),
    }  # fmt: skip


def why(rs: Sequence[ResultRow], saved: Sequence[SavedRow]) -> dict[str, Any]:
    """Where and why ours differ from the paper, as numbers the page words."""
    f32 = [r for r in rs if r.precision == "fp32"]
    worst = max(f32, key=lambda r: abs(r.param_count / r.paper_param_count - 1))
    pm = [r.param_memory_bytes / r.paper_param_memory_bytes for r in f32]
    bpp = [(r.paper_param_memory_bytes / r.paper_param_count, r) for r in f32]
    (most, most_r), (fewest, fewest_r) = max(bpp, key=lambda t: t[0]), min(bpp, key=lambda t: t[0])
    precisions = list(dict.fromkeys(r.precision for r in rs))
    remat = [
        (p, ", ".join(f"{_short(r)} {ratio(r.activation_bytes, r.paper_activation_bytes)}"
                      for r in rs if r.column != "Naive-1" and r.precision == p))
        for p in precisions
    ]  # fmt: skip
    largest = [
        (p, ", ".join(f"{r.model.split('_')[0]} {r.column} "
                      f"{ratio(r.largest_param_count, r.paper_param_count)}"
                      for r in rs if r.largest_param_count and r.precision == p))
        for p in precisions
    ]  # fmt: skip
    return {
        "params": {
            "gap": max(abs(r.param_count / r.paper_param_count - 1) for r in f32),
            "worst": worst, "ours": _count(worst.param_count),
            "paper": _count(worst.paper_param_count),
        },
        "memory": {
            "low": min(pm), "high": max(pm), "most": most, "most_at": f"{most_r.model} {most_r.column}",
            "fewest": fewest, "fewest_at": f"{fewest_r.model} {fewest_r.column}",
        },
        "naive": [n for model in dict.fromkeys(r.model for r in rs) if (n := _naive(rs, saved, model))],
        "remat": [(p, text) for p, text in remat if text],
        "copies": _weight_copies(rs),
        "largest": [(p, text) for p, text in largest if text],
    }  # fmt: skip


def _weight_copies(rs: Sequence[ResultRow]) -> dict[str, str] | None:
    """bf16's own cost: autocast's bf16 copies of a stage's weights, saved by every graph alive."""
    bf = [r for r in rs if r.precision == "bf16" and r.weight_copy_bytes]
    if not bf:
        return None
    f32 = {(r.model, r.column): r for r in rs if r.precision == "fp32"}
    worse = [
        r
        for r in bf
        if (r.model, r.column) in f32
        and r.activation_bytes > f32[r.model, r.column].activation_bytes
    ]
    return {
        "each": ", ".join(
            f"{_short(r)} {gib(r.weight_copy_bytes)} of {gib(r.activation_bytes)}" for r in bf
        ),
        "worse": ", ".join(
            f"{_short(r)} ({gib(r.activation_bytes)} vs "
            f"{gib(f32[r.model, r.column].activation_bytes)})"
            for r in worse
        ),
    }


def fused(rs: Sequence[ResultRow], saved: Sequence[SavedRow]) -> list[list[str]]:
    """The Naive-1 gap under the XLA-like accounting mode (``memory.breakdown.FUSED_AWAY``)."""
    out = []
    for r in (r for r in rs if r.column == "Naive-1" and r.precision == "fp32"):
        groups = [g for g in saved if g.model == r.model and g.precision == "fp32"]
        drops: dict[str, int] = {}
        for g in groups:
            if (reason := fused_away(g.kind, g.dtype)) is not None:
                k = reason.split(":")[0]
                drops[k] = drops.get(k, 0) + g.bytes
        total, paper = sum(g.bytes for g in groups), r.paper_activation_bytes
        left = total - sum(drops.values())
        closed = (total - left) / (total - paper) if total > paper else 0.0
        out.append(
            [r.model, gib(total), ", ".join(f"{k} {gib(v)}" for k, v in drops.items()), gib(left),
             gib(paper), f"{ratio(total, paper)} → {ratio(left, paper)}", pct(closed, 0)]
        )  # fmt: skip
    return out


def summary(
    rs: Sequence[ResultRow], saved: Sequence[SavedRow], alloc: Sequence[AllocRow]
) -> dict[str, Any]:
    """Everything the page says (module doc)."""
    return {
        "planning_s": sum(r.seconds or 0 for r in rs),
        "allocator_s": sum(a.seconds or 0 for a in alloc),
        "halves": halves(rs),
        "headline": headline(rs),
        "allocator": list(alloc),
        "allocator_worst": max(alloc, key=lambda a: abs(a.error)) if alloc else None,
        "allocator_cells": allocator_cells(alloc),
        **why(rs, saved),
        "rules": "; ".join(
            f"{k[0]}{'/' + k[1] if k[1] else ''}: {reason}" for k, reason in FUSED_AWAY.items()
        ),
        "fused_cells": fused(rs, saved),
    }
