"""``table1.md`` from the rows of ``results.csv`` and ``saved.csv``: the tables and every observation.

No number here is typed by hand: each is read or computed from the rows, so ``--from`` the CSV
regenerates the same page.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..provenance import Provenance
from .rows import AllocRow, ResultRow, SavedRow
from .yardsticks import GiB, allocator, fused, gb, headline, ratio

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


def markdown(
    rs: list[ResultRow], saved: list[SavedRow], prov: Provenance, alloc: Sequence[AllocRow] = ()
) -> str:
    lines = [
        *prov.page("Table 1 — the largest model that fits, per number of accelerators"),
        "",
        "A memory model (simulated, nothing allocated: fake CPU tensors run through the "
        "engine's own stage code, so torch picks the kernels the engine gets: CPU attention keeps its output "
        "and log-sum-exp, never the S×S probabilities), validated against the engine's measured activation "
        "bytes in `tests/memory/` (within 10%, fp32 and bf16) and against the allocator below. Paper numbers: "
        "GPipe Table 1. Ratios are ours / paper's. Memory is in GiB (2³⁰ bytes) throughout: the paper's "
        "GB (read as 10⁹ bytes) are converted; budgets are 8 GiB (AmoebaNet, TPUv2) and 16 GiB "
        "(Transformer, TPUv3) per accelerator.",
        "",
        "Terms: parameter memory = fp32 weights + gradients + RMSProp state = 12 bytes/parameter (the same in "
        "both precisions: bf16 keeps fp32 master weights), summed over accelerators; activation memory = the "
        "peak bytes autograd keeps for backward plus boundary buffers, summed over accelerators (the paper's "
        "columns exceed one accelerator's memory, so they are totals); precision = the engine's "
        "`train.precision` (bf16: CPU autocast's policy, activations and boundaries in bf16, the loss and "
        "normalisation statistics in fp32, plus autocast's bf16 weight copies); Naive-1 = one accelerator, no "
        "remat, M = 1; Pipeline-K = GPipe, remat `always`, M = 32, fill-drain schedule, exact min–max "
        "partition of per-layer memory.",
        "",
        f"Wall time (measured, this invocation): {sum(r.seconds or 0 for r in rs) / 60:.1f} min planning the "
        f"columns, {sum(a.seconds or 0 for a in alloc) / 60:.1f} min for the allocator check.",
        "",
    ]
    for model, title, unit in [
        ("amoebanet_d", "AmoebaNet-D, 224×224", "(L, D)"),
        ("transformer_lm", "Transformer-L, 1024-token sequences", "L"),
    ]:
        sub = [r for r in rs if r.model == model]
        if not sub:
            continue
        title += f", batch {sub[0].batch}, {sub[0].budget_bytes / GiB:g} GiB per accelerator"
        lines += [
            f"## {title}",
            "",
            f"| column | precision | {unit} | parameters (ratio) | total parameter memory (ratio) | "
            "peak activation memory, total (ratio) | largest stage: activations / total | fits | "
            f"largest {unit} that fits: parameters (ratio) | M, schedule, remat |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for col in dict.fromkeys(r.column for r in sub):
            ours = [r for r in sub if r.column == col]
            p = ours[0]
            lines.append(
                f"| {col} | paper | {_size(p)} | {_count(p.paper_param_count)} | "
                f"{gb(p.paper_param_memory_bytes)} | {gb(p.paper_activation_bytes)} | — | — | "
                f"{_size(p)}: {_count(p.paper_param_count)} | — |"
            )
            for r in ours:
                fit = (
                    f"{_size(r, 'largest_L', 'largest_D')}: {_count(r.largest_param_count)} "
                    f"({ratio(r.largest_param_count, r.paper_param_count)})"
                    if r.largest_L
                    else "none"
                )
                lines.append(
                    f"| {col} | {r.precision} | {_size(r)} | {_count(r.param_count)} "
                    f"({ratio(r.param_count, r.paper_param_count)}) | {gb(r.param_memory_bytes)} "
                    f"({ratio(r.param_memory_bytes, r.paper_param_memory_bytes)}) | "
                    f"{gb(r.activation_bytes)} ({ratio(r.activation_bytes, r.paper_activation_bytes)}) | "
                    f"{gb(r.max_stage_activation_bytes)} / {gb(r.max_stage_total_bytes)} | "
                    f"{'yes' if r.fits else '**no**'} | {fit} | {r.M}, {r.schedule}, {r.checkpoint} |"
                )
        notes = [f"- {r.column}, {r.precision}: {r.note}" for r in sub if r.note]
        lines += ["", *notes, ""] if notes else [""]
    lines += headline(rs)
    lines += allocator(list(alloc))
    lines += ["## Where and why ours differ", "", *why(rs, saved), ""]
    lines += fused(rs, saved)
    return "\n".join(lines)


def remains(
    saved: list[SavedRow], model: str, precision: str, share: float = 0.8
) -> tuple[list[SavedRow], int]:
    """The largest saved-tensor groups of ``model``'s Naive-1 column that together hold ``share`` of
    its saved bytes, and the total."""
    groups = sorted(
        (g for g in saved if g.model == model and g.precision == precision),
        key=lambda g: -g.bytes,
    )
    total = sum(g.bytes for g in groups)
    top, acc = [], 0
    for g in groups:
        if acc >= share * total:
            break
        top.append(g)
        acc += g.bytes
    return top, total


def _naive_gap(rs: list[ResultRow], saved: list[SavedRow], model: str) -> list[str]:
    by = {r.precision: r for r in rs if r.model == model and r.column == "Naive-1"}
    if not {"fp32", "bf16"} <= set(by):
        return []
    f, b = by["fp32"], by["bf16"]
    paper = f.paper_activation_bytes
    gap = f.activation_bytes - paper
    closed = (f.activation_bytes - b.activation_bytes) / gap if gap > 0 else 0.0
    out = [
        f"- {model} Naive-1: our activation estimate is {ratio(f.activation_bytes, paper)} the paper's "
        f"in fp32 ({gb(f.activation_bytes)} vs {gb(paper)}) and {ratio(b.activation_bytes, paper)} in "
        f"bf16 ({gb(b.activation_bytes)}): bf16 closes {closed * 100:.0f}% of the gap. The largest model "
        f"that fits one accelerator goes from {ratio(f.largest_param_count, f.paper_param_count)} to "
        f"{ratio(b.largest_param_count, b.paper_param_count)} the paper's size."
    ]
    top, total = remains(saved, model, "bf16")
    if total:
        listed = "; ".join(f"{_kind(g)} {gb(g.bytes)} ({g.bytes / total * 100:.0f}%)" for g in top)
        kept = [
            g
            for g in saved
            if g.model == model
            and g.precision == "bf16"
            and g.dtype not in ("bfloat16", "float16")
            and g.bytes > 0
        ]
        k = sum(g.bytes for g in kept)
        out.append(
            f"  What remains in bf16 ({gb(total)} kept for backward): {listed}. Not halved by bf16: "
            f"{gb(k)} ({k / total * 100:.0f}%) in "
            + ", ".join(sorted({f"{g.dtype}" for g in kept}))
            + " — "
            + "; ".join(
                f"{_kind(g)} {gb(g.bytes)}" for g in sorted(kept, key=lambda g: -g.bytes)[:3]
            )
            + ". The paper measured XLA on TPU, which fuses element-wise operations and pooling into "
            "their neighbours and keeps fewer, smaller buffers; eager PyTorch saves each operation's "
            "own."
        )
    return out


def _weight_copies(rs: list[ResultRow]) -> list[str]:
    """bf16's own cost: autocast's bf16 copies of a stage's weights, saved by every graph alive."""
    bf = [r for r in rs if r.precision == "bf16" and r.weight_copy_bytes]
    if not bf:
        return []
    f32 = {(r.model, r.column): r for r in rs if r.precision == "fp32"}
    worse = [
        r
        for r in bf
        if (r.model, r.column) in f32
        and r.activation_bytes > f32[r.model, r.column].activation_bytes
    ]
    out = [
        "- bf16 adds autocast's bf16 copies of the weights (2 bytes per parameter, saved by each graph alive; "
        "1 with remat `always`): "
        + ", ".join(
            f"{r.column} {r.model.split('_')[0]} {gb(r.weight_copy_bytes)} of {gb(r.activation_bytes)}"
            for r in bf
        )
        + "."
    ]
    if worse:
        out[0] += (
            " Where a stage holds many parameters and remat keeps few activations, the copies outweigh "
            "the halved activations and bf16's total exceeds fp32's: "
            + ", ".join(
                f"{r.column} {r.model.split('_')[0]} ({gb(r.activation_bytes)} vs "
                f"{gb(f32[r.model, r.column].activation_bytes)})"
                for r in worse
            )
            + "."
        )
    return out


def why(rs: list[ResultRow], saved: list[SavedRow]) -> list[str]:
    """Observations computed from the rows (no number here is typed by hand)."""
    out = []
    f32 = [r for r in rs if r.precision == "fp32"]
    pr = [r.param_count / r.paper_param_count for r in f32]
    worst = max(f32, key=lambda r: abs(r.param_count / r.paper_param_count - 1))
    out.append(
        f"- Parameter counts match the paper within {max(abs(x - 1) for x in pr) * 100:.1f}% "
        f"(largest gap: {worst.model} {worst.column}, {_count(worst.param_count)} where the paper "
        f"prints {_count(worst.paper_param_count)} — a rounded label)."
    )
    pm = [r.param_memory_bytes / r.paper_param_memory_bytes for r in f32]
    bpp = [(r.paper_param_memory_bytes / r.paper_param_count, r) for r in f32]
    hi_b, hi_r = max(bpp, key=lambda t: t[0])
    lo_b, lo_r = min(bpp, key=lambda t: t[0])
    out.append(
        f"- Parameter memory is 12 bytes × count; the paper's measured TPU figures differ from that by "
        f"{min(pm):.2f}× to {max(pm):.2f}×: they range from {lo_b:.1f} bytes per parameter "
        f"({lo_r.model} {lo_r.column}) to {hi_b:.1f} ({hi_r.model} {hi_r.column}), so the "
        "paper's row is a measurement on TPU, not a formula; we do not calibrate against it."
    )
    for model in dict.fromkeys(r.model for r in rs):
        out += _naive_gap(rs, saved, model)
    for precision in dict.fromkeys(r.precision for r in rs):
        pipes = [r for r in rs if r.column != "Naive-1" and r.precision == precision]
        if pipes:
            out.append(
                f"- With remat, {precision}: activation ratios "
                + ", ".join(
                    f"{r.column} {r.model.split('_')[0]} {ratio(r.activation_bytes, r.paper_activation_bytes)}"
                    for r in pipes
                )
                + ": with M = 32 a stage holds its 32 micro-batch inputs and one micro-batch's "
                "internals, O(N + L/K·N/M)."
            )
    out += _weight_copies(rs)
    for precision in dict.fromkeys(r.precision for r in rs):
        fit = [r for r in rs if r.largest_param_count and r.precision == precision]
        if fit:
            out.append(
                f"- Largest model that fits, ours vs the paper's size, {precision}: "
                + ", ".join(
                    f"{r.model.split('_')[0]} {r.column} {ratio(r.largest_param_count, r.paper_param_count)}"
                    for r in fit
                )
                + "."
            )
    return out
