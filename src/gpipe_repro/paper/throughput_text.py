"""The page and the plot of Table 2 or 3, from its rows (``paper.throughput`` builds them).

Per model: the paper's number beside every series' normalised throughput with the ratio and the fits
flag, then one table per series with the cell's batch, micro-batch, whether it fits, its factors and
the sentence that says why it differs, and the simulator's studies (``paper.throughput_sim``) with
the statements their rows support; the plot draws every series against K beside the paper and the
bubble bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from .numbers import throughput
from .plot import figure
from .provenance import Provenance
from .validate_hw.flags import MARK, Anchoring

LINK_OK = 0.95  # "not the bottleneck": at least this share of the free link's throughput
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
    elif r.hardware.startswith("measured on "):  # a committed GPU profile (paper.throughput_gpu)
        where = f"simulated from per-layer costs {r.hardware}"
    else:
        where = f"simulated on {DEVICES.get(r.hardware, r.hardware)} profile"
    return f"{where} · {BATCH.get(r.batch_mode, 'batch ' + r.batch_mode)}"


def _mark(r: Any, anchors: Anchoring) -> str:
    """The validate-hw mark of a cell simulated on a published profile (``anchors``)."""
    return anchors.mark(r.model, r.hardware) if r.source == "simulated" else ""


def _cells(r: Any, anchors: Anchoring) -> list[str]:
    if r is None:
        return ["—", "—"]
    if r.normalized is None:
        return ["failed", "—"]
    flag = " (no fit)" if r.fits_memory is False else ""
    ours = f"{r.normalized:.2f}{_mark(r, anchors)}{flag}"
    return [ours, "—" if r.ratio is None else f"{r.ratio:.2f}"]


def _f(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def _series(r: Any, anchors: Anchoring) -> str:
    fits = {True: "yes", False: "**no**"}.get(r.fits_memory, "—")
    head = f"| {r.M or '—'} | {r.K} | {r.batch_size or '—'} | {r.micro_batch or '—'} | {fits} | "
    if r.normalized is None:
        return head + f"— | failed | {_f(r.paper_normalized)} | — | — | — | — | — | — | {r.why} |"
    factors = (r.bound, r.balance, r.overlap, r.transfers, r.efficiency)
    return head + (
        f"{r.throughput:.4g} | {r.normalized:.2f}{_mark(r, anchors)} | {_f(r.paper_normalized)} | "
        f"{_f(r.ratio)} | " + " | ".join(_f(v) for v in factors) + f" | {r.why} |"
    )


def _footnotes(rows: Sequence[Any], anchors: Anchoring) -> list[str]:
    """Why the cells of ``rows`` that carry the mark have it (one line per model and profile)."""
    pairs = dict.fromkeys((r.model, r.hardware) for r in rows if _mark(r, anchors))
    return [
        f"{MARK} Rests on a roofline not anchored well enough, as judged by {anchors.where}: "
        f"{anchors.why[p]}."
        for p in pairs
    ]


def markdown(
    rows: Sequence[Any],
    prov: Provenance,
    table: int,
    title: str,
    names: dict[str, str],
    ref: str,
    anchors: Anchoring | None = None,
) -> str:
    """The page; ``anchors``: validate-hw's judgement of the published profiles, a mark beside
    every cell that rests on one not anchored well enough (None: not judged)."""
    anchors = anchors or Anchoring()
    judged = (
        f"{MARK}: the cell is simulated on a published profile that {anchors.where} finds not "
        "anchored well enough for it (the footnote under each model says why)."
        if anchors.where
        else "Published profiles not judged here: no `make validate-hw` report was found."
    )
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
        "fit the device's memory (shown, never a normaliser). " + judged,
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
                    ),
                    anchors,
                )
            ]
            lines.append(f"| {M} | {K} | {paper[(K, M)]:g} | " + " | ".join(cells) + " |")
        lines.append("")
        for lb in every:
            refs = {r.reference for r in ms if label(r) == lb and r.reference}
            note = f"normalised to {', '.join(sorted(refs))}" if refs else "no cell fits"
            lines.append(f"- *{lb}*: {note}")
        lines += ["", *_footnotes(ms, anchors), ""] if _footnotes(ms, anchors) else [""]
        for lb in every:
            lines += [
                f"### {names[model]} — {lb}",
                "",
                "| M | K | batch | micro-batch | fits | samples/s | ours | paper (same ref) | ratio | "
                "bound | balance | overlap | transfers | efficiency | why |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
                *(_series(r, anchors) for r in ms if label(r) == lb),
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


def _mb(text: str) -> str:
    return ", ".join(f"{int(b) / 2**20:.1f}" for b in text.split(";") if b) or "—"


def _table(title: str, cols: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    head = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return [f"### {title}", "", *head, *("| " + " | ".join(c) + " |" for c in cells), ""]


def _partition_section(rows: Sequence[Any], names: dict[str, str]) -> list[str]:
    out = []
    for mod in dict.fromkeys(r.model for r in rows):
        rs = [r for r in rows if r.model == mod]
        cols = "M K partition balance slowest/mean samples/s normalised paper".split()
        out += _table(
            f"{names.get(mod, mod)}: the partition",
            cols,
            [
                [str(r.M), str(r.K), r.variant, r.balance, f"{r.imbalance:.2f}",
                 f"{r.throughput:.4g}", f"{r.normalized:.2f}",
                 "—" if r.paper_normalized is None else f"{r.paper_normalized:g}"]
                for r in sorted(rs, key=lambda r: (r.M, r.K))
            ],
        )  # fmt: skip
        top = max(rs, key=lambda r: (r.K, r.M))
        at = [r for r in rs if (r.K, r.M) == (top.K, top.M)]
        text = ", ".join(
            f"{r.variant} {r.normalized:.2f} (slowest/mean {r.imbalance:.2f})" for r in at
        )
        paper = "" if top.paper_normalized is None else f"; the paper {top.paper_normalized:g}"
        out += [f"At K = {top.K}, M = {top.M}: {text}{paper}.", ""]
    return out


def _link_section(
    rows: Sequence[Any], main: Sequence[Any], names: dict[str, str], hw: str
) -> list[str]:
    out = []
    for mod in dict.fromkeys(r.model for r in rows):
        rs = [r for r in rows if r.model == mod]
        cols = ["K", "link", "boundary MiB per stage", "samples/s", "normalised", "vs free link"]
        out += _table(
            f"{names.get(mod, mod)}: the link (M = {rs[0].M})",
            cols,
            [
                [str(r.K), r.variant, _mb(r.boundary_bytes), f"{r.throughput:.4g}",
                 f"{r.normalized:.2f}", f"{r.vs_free:.3f}"]
                for r in sorted(rs, key=lambda r: r.K)
            ],
        )  # fmt: skip
        variants = list(dict.fromkeys(r.variant for r in rs if r.variant != "free link"))
        holds = [
            v for v in variants if all((r.vs_free or 0.0) >= LINK_OK for r in rs if r.variant == v)
        ]
        fails = [v for v in variants if v not in holds]
        worst = min(rs, key=lambda r: r.vs_free or 1.0)
        out += [
            f'"Communication is not the bottleneck" (at least {LINK_OK:.0%} of the free link\'s '
            f"throughput at every K) holds under: {'; '.join(holds) or 'none'} — and not under: "
            f"{'; '.join(fails) or 'none'} (worst: {worst.variant} at K = {worst.K}, "
            f"{worst.vs_free:.0%}).",
            "",
        ]
        ours = [
            r for r in main
            if r.model == mod and r.hardware == hw and r.batch_mode == "fixed" and r.ratio
        ]  # fmt: skip
        for r in sorted(ours, key=lambda r: r.K):
            if r.reference == f"K={r.K}, M={r.M}":
                continue
            free = next((q for q in rs if q.variant == "free link" and q.K == r.K), None)
            verdict = (
                "contradicts" if abs((r.ratio or 1.0) - 1) > 0.10 else "agrees with (within 10%)"
            )
            out.append(
                f"- At K = {r.K} our {hw} result ({r.normalized:.2f}) {verdict} the paper's "
                f"{r.paper_normalized:.2f} (ratio {r.ratio:.2f})"
                + (f"; with a free link it would be {free.normalized:.2f}." if free else ".")
            )
        out.append("")
    return out


def _by_model(rows: Sequence[Any]) -> Iterator[tuple[str, list[Any], list[str]]]:
    """Each model's rows, with their variants in order of appearance."""
    for mod in dict.fromkeys(r.model for r in rows):
        rs = [r for r in rows if r.model == mod]
        yield mod, rs, list(dict.fromkeys(r.variant for r in rs))


def _efficiency_section(rows: Sequence[Any], names: dict[str, str]) -> list[str]:
    out = []
    for mod, rs, where in _by_model(rows):
        sizes = sorted({r.micro_batch for r in rs})
        at = {(r.variant, r.micro_batch): r for r in rs}
        cols = ["micro-batch"] + [f"{w}: {c}" for w in where for c in ("ms/sample", "efficiency")]
        out += _table(
            f"{names.get(mod, mod)}: per-sample compute over the micro-batch",
            cols,
            [
                [str(n)]
                + [
                    x
                    for w in where
                    for x in (
                        (f"{1e3 / at[w, n].throughput:.4g}", f"{at[w, n].normalized:.2f}")
                        if (w, n) in at
                        else ("—", "—")
                    )
                ]
                for n in sizes
            ],
        )
        lo, hi = sizes[0], sizes[-1]
        out += [
            "Forward and backward of every layer per sample, no optimiser step or transfers; "
            f"efficiency = samples/s over micro-batch {hi}'s. From {lo} to {hi}: "
            + "; ".join(f"{w} {at[w, lo].normalized:.2f} → 1.00" for w in where if (w, lo) in at)
            + ".",
            "",
        ]
    return out


def _extrapolation_section(rows: Sequence[Any], names: dict[str, str]) -> list[str]:
    out = []
    for mod, rs, variants in _by_model(rows):
        at = {(r.variant, r.K, r.M): r for r in rs}
        keys = sorted({(r.M, r.K) for r in rs})
        cols = ["M", "K", "micro-batch", *(f"{v}: normalised" for v in variants), "paper"]
        out += _table(
            f"{names.get(mod, mod)}: on this CPU, per-sample cost measured or kept constant",
            cols,
            [
                [str(M), str(K), str(at[variants[0], K, M].micro_batch)]
                + [f"{at[v, K, M].normalized:.2f}" for v in variants]
                + [
                    "—"
                    if at[variants[0], K, M].paper_normalized is None
                    else f"{at[variants[0], K, M].paper_normalized:g}"
                ]
                for M, K in keys
            ],
        )
        M, K = keys[-1]
        a, b = at[variants[0], K, M], at[variants[1], K, M]
        out += [
            f"At K = {K}, M = {M}: {a.normalized:.2f} {variants[0]}, {b.normalized:.2f} with the "
            f"{variants[1]} (the sweeps' fixed batch on this CPU's costs, timing only: each "
            "normalised to its own K = 2 at the table's reference M, where the main table takes "
            "the first cell that fits)"
            + ("" if a.paper_normalized is None else f"; the paper {a.paper_normalized:g}")
            + ".",
            "",
        ]
    return out


def section(rows: Sequence[Any], main: Sequence[Any], names: dict[str, str], hw: str) -> list[str]:
    """The page's section on these studies (module doc), its statements read from the rows."""
    if not rows:
        return []
    return [
        "## What the simulator says under other assumptions",
        "",
        f"Simulated on the {hw} profile (the per-sample studies also on this CPU's measured "
        "costs) at the sweeps' fixed batch, timing only (memory is not checked here); each "
        "variant normalised to its own K = 2 at the table's reference M "
        "(`paper/throughput_sim.py`).",
        "",
        *_partition_section([r for r in rows if r.study == "partition"], names),
        *_link_section([r for r in rows if r.study == "link"], main, names, hw),
        *_efficiency_section([r for r in rows if r.study == "efficiency"], names),
        *_extrapolation_section([r for r in rows if r.study == "extrapolation"], names),
    ]
