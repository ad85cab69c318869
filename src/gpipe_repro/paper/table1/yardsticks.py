"""Table 1 against the paper's yardsticks: §3's headline ratios, the CPU allocator's peak, and the
Naive-1 gap under an XLA-like accounting mode — page sections, from the CSVs' rows alone."""

from __future__ import annotations

from ...memory.breakdown import FUSED_AWAY, fused_away
from ..numbers import QUOTES, quote
from .rows import AllocRow, ResultRow, SavedRow

GiB = 2**30


def gb(b: float | None) -> str:
    return "—" if b is None else f"{b / GiB:.2f} GiB"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"{a / b:.2f}×"


def headline(rs: list[ResultRow]) -> list[str]:
    """§3's headline ratios (the largest model of a column over Naive-1's), ours beside the paper's."""
    out = [
        "## The paper's headline ratios (GPipe §3)",
        "",
        "Largest model that fits in a column over the largest that fits Naive-1 (one accelerator, no "
        "GPipe). Paper: the ratio printed in §3, and the same ratio from its Table 1's parameter counts.",
        "",
        "| ratio | paper, printed | paper, from Table 1 | ours, fp32 | ours, bf16 |",
        "|---|---|---|---|---|",
    ]
    for q in (q for q in QUOTES if q.table == 1 and q.row == "ratio"):
        model, column = q.column.split()
        by = {(r.column, r.precision): r.largest_param_count for r in rs if r.model == model}
        paper = (
            quote(1, f"{model} {column}", "parameters").value
            / quote(1, f"{model} Naive-1", "parameters").value
        )
        ours = [
            ratio(by.get((column, p)), by.get(("Naive-1", p))).replace("×", "") + "×"
            if by.get((column, p)) and by.get(("Naive-1", p))
            else "—"
            for p in ("fp32", "bf16")
        ]
        out.append(
            f"| {q.note}: {model} {column} / Naive-1 | {q.value:g}× | {paper:.1f}× | {ours[0]} | {ours[1]} |"
        )
    return [*out, ""]


def allocator(alloc: list[AllocRow]) -> list[str]:
    """The planner's per-stage peak against the CPU allocator's measured peak."""
    if not alloc:
        return []
    worst = max(alloc, key=lambda a: abs(a.error))
    return [
        "## The planner against the allocator (measured on this CPU)",
        "",
        f"{alloc[0].model}, batch {alloc[0].batch}, M = {alloc[0].M}, GPipe fill-drain, fp32: each "
        "stage run for real through the engine's stage code, one step after a warm-up step; measured "
        "peak = the CPU allocator's peak of bytes allocated during the step (torch profiler memory "
        "events) + the stage's state (`memory/allocator.py`). Error = (planned − measured) / measured.",
        "",
        "| K | stage | remat | state | planned peak | measured peak | error |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {a.K} | {a.stage} | {a.checkpoint} | {a.state_bytes / 2**20:.2f} MiB | "
            f"{a.planned_bytes / 2**20:.2f} MiB | {a.measured_bytes / 2**20:.2f} MiB | "
            f"{a.error * 100:+.1f}% |"
            for a in alloc
        ),
        "",
        f"Largest error: {worst.error * 100:+.1f}% (K = {worst.K}, stage {worst.stage}, remat "
        f"{worst.checkpoint}); negative = the planner under-counts (kernel temporaries, backward's "
        "buffers).",
        "",
    ]


def fused(rs: list[ResultRow], saved: list[SavedRow]) -> list[str]:
    """The Naive-1 gap under the XLA-like accounting mode (``memory.breakdown.FUSED_AWAY``)."""
    out = [
        "## The Naive-1 gap under an XLA-like accounting (a labelled estimate, fp32)",
        "",
        "Accounting mode, not a measurement of XLA: the planner's saved tensors of Naive-1 "
        "(`saved.csv`), without those a compiler fusing element-wise work would not keep — "
        + "; ".join(f"{k[0]}{'/' + k[1] if k[1] else ''}: {why}" for k, why in FUSED_AWAY.items())
        + ". The gap is ours / paper's activation memory; closed = the share of (ours − paper) "
        "removed.",
        "",
        "| model | eager (ours) | dropped by rule | XLA-like | paper | ratio eager → XLA-like | gap closed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in (r for r in rs if r.column == "Naive-1" and r.precision == "fp32"):
        groups = [g for g in saved if g.model == r.model and g.precision == "fp32"]
        drops: dict[str, int] = {}
        for g in groups:
            if (why := fused_away(g.kind, g.dtype)) is not None:
                k = why.split(":")[0]
                drops[k] = drops.get(k, 0) + g.bytes
        total, paper = sum(g.bytes for g in groups), r.paper_activation_bytes
        left = total - sum(drops.values())
        closed = (total - left) / (total - paper) if total > paper else 0.0
        out.append(
            f"| {r.model} | {gb(total)} | "
            + ", ".join(f"{k} {gb(v)}" for k, v in drops.items())
            + f" | {gb(left)} | {gb(paper)} | {ratio(total, paper)} → {ratio(left, paper)} | "
            f"{closed * 100:.0f}% |"
        )
    note = (
        "The ReLU rule suits AmoebaNet's ReLU-conv-BN chains (a ReLU's input is a kept sum or "
        "normalisation input); in the Transformer a ReLU's output is also the next linear layer's "
        "input, so that rule is optimistic there."
    )
    return [*out, "", note, ""]
