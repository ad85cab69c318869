"""The page and the plot of Table 2 or 3, from its rows (``paper.throughput`` builds them).

Per model: the paper's number beside every series' normalised throughput with the ratio and the fits
flag, then one table per series with the cell's batch, micro-batch, whether it fits, its factors and
the sentence that says why it differs; the plot draws every series against K beside the paper and the bubble bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from .numbers import throughput
from .plot import figure
from .provenance import Provenance

DEVICES = {"tpu_v3": "a TPU v3", "p100_pcie": "a P100 (PCIe)"}
BATCH = {
    "fixed": "fixed batch",
    "fit": "batch adjusted to fit memory",
    "planner": "planner's pick per K",
}


def label(r: Any) -> str:
    """What a series is: where its numbers come from, in words, and its batch."""
    if r.source == "measured":
        where = f"measured on K GPUs ({r.hardware})"
    elif r.hardware == "measured":
        where = "simulated on this machine's measured costs"
    else:
        where = f"simulated on {DEVICES.get(r.hardware, r.hardware)} profile"
    return f"{where} · {BATCH.get(r.batch_mode, 'batch ' + r.batch_mode)}"


def _cells(r: Any) -> list[str]:
    if r is None:
        return ["—", "—"]
    if r.normalized is None:
        return ["failed", "—"]
    flag = " (no fit)" if r.fits_memory is False else ""
    return [f"{r.normalized:.2f}{flag}", "—" if r.ratio is None else f"{r.ratio:.2f}"]


def _f(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def _series(r: Any) -> str:
    fits = {True: "yes", False: "**no**"}.get(r.fits_memory, "—")
    head = f"| {r.M} | {r.K} | {r.batch_size or '—'} | {r.micro_batch or '—'} | {fits} | "
    if r.normalized is None:
        return head + f"— | failed | {_f(r.paper_normalized)} | — | — | — | — | — | — | {r.why} |"
    factors = (r.bound, r.balance, r.overlap, r.transfers, r.efficiency)
    return head + (
        f"{r.throughput:.4g} | {r.normalized:.2f} | {_f(r.paper_normalized)} | {_f(r.ratio)} | "
        + " | ".join(_f(v) for v in factors)
        + f" | {r.why} |"
    )


def markdown(
    rows: Sequence[Any], prov: Provenance, table: int, title: str, names: dict[str, str], ref: str
) -> str:
    lines = [
        *prov.page(title),
        "",
        "Every series is labelled with what it is: *measured on K GPUs* by the engine where the host "
        "had K devices, else *simulated* (`backend=auto`) — on this machine's measured per-layer costs "
        "or on a published device's profile (a roofline, anchored on published throughputs); with a "
        "*fixed batch* as configured, the *batch adjusted to fit memory* (the largest that fits each "
        "K, the paper's wording), or the *planner's pick per K* (`gpipe-plan` on K devices, one "
        f"replica: its M, schedule, remat and partition). Each series is normalised to its {ref} if "
        "that cell's batch fits, else to its first cell that fits; the paper's numbers are "
        "re-normalised to the same cell before every ratio. *(no fit)*: the cell's batch does not "
        "fit the device's memory (shown, never a normaliser).",
        "",
        "`normalised = bound × balance × overlap × transfers × efficiency` (`paper/throughput.py`): "
        "the bubble bound K·M/(M+K−1) relative to the reference cell, the slowest stage's extra "
        "work, the early recompute overlapping the drain (§2.3), what is left — transfers, waits, "
        "the optimiser step and per-step overhead —, and compute per sample.",
        "",
    ]
    for model in dict.fromkeys(r.model for r in rows):
        ms = [r for r in rows if r.model == model]
        every = list(dict.fromkeys(label(r) for r in ms))
        labels = [lb for lb in every if BATCH["planner"] not in lb]  # one M per K: below only
        lines += [
            f"## {names[model]}",
            "",
            "| M | K | paper | " + " | ".join(f"{lb} | ratio" for lb in labels) + " |",
            "|---|---|---|" + "---|---|" * len(labels),
        ]
        paper = throughput(table, model)
        for K, M in sorted(paper, key=lambda km: (km[1], km[0])):
            cells = [
                c
                for lb in labels
                for c in _cells(
                    next(
                        (x for x in ms if label(x) == lb and (x.K, x.M) == (K, M)),
                        None,
                    )
                )
            ]
            lines.append(f"| {M} | {K} | {paper[(K, M)]:g} | " + " | ".join(cells) + " |")
        lines.append("")
        for lb in every:
            refs = {r.reference for r in ms if label(r) == lb and r.reference}
            note = f"normalised to {', '.join(sorted(refs))}" if refs else "no cell fits"
            lines.append(f"- *{lb}*: {note}")
        lines.append("")
        for lb in every:
            lines += [
                f"### {names[model]} — {lb}",
                "",
                "| M | K | batch | micro-batch | fits | samples/s | ours | paper (same ref) | ratio | "
                "bound | balance | overlap | transfers | efficiency | why |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
                *(_series(r) for r in ms if label(r) == lb),
                "",
            ]
    return "\n".join(lines)


def plot(rows: Sequence[Any], table: int, names: dict[str, str], ref_M: int, path: Path) -> None:
    models = list(dict.fromkeys(r.model for r in rows))
    Ms = sorted({M for m in models for (_, M) in throughput(table, m)})
    with figure(
        path, len(models), len(Ms), figsize=(4.2 * len(Ms), 3.4 * len(models)), squeeze=False
    ) as (fig, axes):
        ref_bound = 2 * (1 - bubble_fraction(2, ref_M))
        for i, model in enumerate(models):
            for j, M in enumerate(Ms):
                ax = axes[i][j]
                pts = sorted((K, v) for (K, m), v in throughput(table, model).items() if m == M)
                ks = [k for k, _ in pts]
                ax.plot(ks, [v for _, v in pts], "ko-", lw=2, label="paper")
                bound = [k * (1 - bubble_fraction(k, M)) / ref_bound for k in ks]
                ax.plot(ks, bound, "k:", alpha=0.5, label="bubble bound")
                for lb in dict.fromkeys(label(r) for r in rows if r.model == model):
                    rs = sorted(
                        (
                            r
                            for r in rows
                            if r.model == model
                            and label(r) == lb
                            and r.M == M
                            and r.normalized is not None
                        ),
                        key=lambda r: r.K,
                    )
                    if rs:
                        ax.plot([r.K for r in rs], [r.normalized for r in rs], "o--", label=lb)
                ax.set(
                    title=f"{names[model]}, M = {M}",
                    xlabel="K",
                    ylabel="normalised throughput",
                    xscale="log",
                )
                ax.set_xticks([2, 4, 8], ["2", "4", "8"])
                ax.minorticks_off()
                ax.grid(alpha=0.3)
                ax.legend(fontsize=6)
