"""The page and the plot of Table 2 or 3, from its rows (``paper.throughput`` builds them).

Per model: the paper's number beside every series' normalised throughput with the ratio, then one
table per series with the cell's batch, micro-batch, whether it fits, its factors and the sentence that
says why it differs; the plot draws every series against K beside the paper and the bubble bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from .numbers import throughput
from .plot import figure
from .provenance import Provenance


def label(r: Any) -> str:
    return f"{r.source} · {r.hardware} · batch {r.batch_mode}"


def _cells(r: Any) -> list[str]:
    if r is None:
        return ["—", "—"]
    if r.normalized is None:
        return ["failed", "—"]
    return [f"{r.normalized:.2f}", "—" if r.ratio is None else f"{r.ratio:.2f}"]


def _series(r: Any) -> str:
    fits = {True: "yes", False: "**no**"}.get(r.fits_memory, "—")
    paper = "—" if r.paper_normalized is None else f"{r.paper_normalized:g}"
    ratio = "—" if r.ratio is None else f"{r.ratio:.2f}"
    if r.normalized is None:
        return (
            f"| {r.M} | {r.K} | {r.batch_size or '—'} | — | — | — | failed | {paper} | "
            f"— | — | — | — | — | {r.why} |"
        )
    return (
        f"| {r.M} | {r.K} | {r.batch_size} | {r.micro_batch} | {fits} | "
        f"{r.throughput:.4g} | {r.normalized:.2f} | {paper} | {ratio} | {r.bound:.2f} | "
        f"{r.balance:.2f} | {r.transfers:.2f} | {r.efficiency:.2f} | {r.why} |"
    )


def markdown(
    rows: Sequence[Any], prov: Provenance, table: int, title: str, names: dict[str, str], ref: str
) -> str:
    lines = [
        *prov.page(title),
        "",
        "Every cell is labelled *source · hardware · batch*: *measured* by the engine where the host "
        "had K devices, else *simulated* (`backend=auto`); *fixed* batch as configured, or *fit*: the "
        "largest batch that fits each K on the hardware's memory (the paper: 'adjusted to fit "
        f"memory'). Each series is normalised to its own {ref}, as the paper normalises each model.",
        "",
        "`normalised = bound × balance × transfers × efficiency` (see `paper/throughput.py`): the "
        "bubble bound K·M/(M+K−1) relative to the reference cell, the slowest stage's extra work, "
        "transfers, the optimiser step and per-step overhead, and compute per sample (micro-batch size, batch).",
        "",
    ]
    for model in dict.fromkeys(r.model for r in rows):
        ms = [r for r in rows if r.model == model]
        labels = list(dict.fromkeys(label(r) for r in ms))
        lines += [
            f"## {names[model]}",
            "",
            "| M | K | paper | " + " | ".join(f"{lb} | ratio" for lb in labels) + " |",
            "|---|---|---|" + "---|---|" * len(labels),
        ]
        paper = throughput(table, model)
        for (K, M), value in sorted(paper.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            cells = [
                c
                for lb in labels
                for c in _cells(
                    next((x for x in ms if label(x) == lb and (x.K, x.M) == (K, M)), None)
                )
            ]
            lines.append(f"| {M} | {K} | {value:g} | " + " | ".join(cells) + " |")
        lines.append("")
        for lb in labels:
            lines += [
                f"### {names[model]} — {lb}",
                "",
                "| M | K | batch | micro-batch | fits | samples/s | ours | paper | ratio | bound | balance | "
                "transfers | efficiency | why |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
