"""What the page of Table 2 or 3 says, from its rows (``paper.throughput`` builds them), and its plot.

Per model: the paper's number beside every series' normalised throughput with the ratio and the fits
flag, then one table per series with the cell's batch, micro-batch, whether it fits, its factors and
the sentence that says why it differs; then the simulator's studies (``paper.throughput_sim``) with
the statements their rows support (``templates/throughput.md.j2`` words them). The plot draws every
series against K beside the paper and the bubble bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from .markdown import DASH, num
from .numbers import throughput
from .plot import figure
from .provenance import Provenance
from .template import render
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
        return [DASH, DASH]
    if r.normalized is None:
        return ["failed", DASH]
    flag = " (no fit)" if r.fits_memory is False else ""
    return [f"{r.normalized:.2f}{_mark(r, anchors)}{flag}", num(r.ratio)]


def _series(r: Any, anchors: Anchoring) -> list[Any]:
    fits = {True: "yes", False: "**no**"}.get(r.fits_memory, DASH)
    head = [r.M or DASH, r.K, r.batch_size or DASH, r.micro_batch or DASH, fits]
    if r.normalized is None:
        return [*head, DASH, "failed", num(r.paper_normalized), *[DASH] * 6, r.why]
    factors = (r.bound, r.balance, r.overlap, r.transfers, r.efficiency)
    return [*head, f"{r.throughput:.4g}", f"{r.normalized:.2f}{_mark(r, anchors)}",
            num(r.paper_normalized), num(r.ratio), *map(num, factors), r.why]  # fmt: skip


def _model(rows: Sequence[Any], table: int, name: str, anchors: Anchoring) -> dict[str, Any]:
    """One model's tables: the paper beside every series (but the planner's, one M per K, shown
    below alone), the normaliser of each, the footnotes of marked cells, each series' own table."""
    every = list(dict.fromkeys(label(r) for r in rows))
    labels = [lb for lb in every if BATCH["planner"] not in lb]
    paper = throughput(table, rows[0].model)
    at = {(label(r), r.K, r.M): r for r in reversed(rows)}  # the first of each, as the page reads
    notes = []
    for lb in every:
        refs = {r.reference for r in rows if label(r) == lb and r.reference}
        notes.append((lb, f"normalised to {', '.join(sorted(refs))}" if refs else "no cell fits"))
    marked = dict.fromkeys((r.model, r.hardware) for r in rows if _mark(r, anchors))
    return {
        "name": name,
        "head": ["M", "K", "paper", *(c for lb in labels for c in (lb, "ratio"))],
        "cells": [
            [
                M,
                K,
                f"{paper[(K, M)]:g}",
                *(c for lb in labels for c in _cells(at.get((lb, K, M)), anchors)),
            ]
            for K, M in sorted(paper, key=lambda km: (km[1], km[0]))
        ],  # fmt: skip
        "notes": notes,
        "footnotes": [anchors.why[p] for p in marked],
        "series": [(lb, [_series(r, anchors) for r in rows if label(r) == lb]) for lb in every],
    }


def _by_model(rows: Sequence[Any]) -> Iterator[tuple[str, list[Any], list[str]]]:
    """Each model's rows, with their variants in order of appearance."""
    for mod in dict.fromkeys(r.model for r in rows):
        rs = [r for r in rows if r.model == mod]
        yield mod, rs, list(dict.fromkeys(r.variant for r in rs))


def _mib(text: str) -> str:
    return ", ".join(f"{int(b) / 2**20:.1f}" for b in text.split(";") if b) or DASH


def _partition(rows: Sequence[Any], names: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for mod, rs, _ in _by_model(rows):
        top = max(rs, key=lambda r: (r.K, r.M))
        out.append({
            "name": names.get(mod, mod),
            "cells": [
                [r.M, r.K, r.variant, r.balance, f"{r.imbalance:.2f}", f"{r.throughput:.4g}",
                 f"{r.normalized:.2f}", num(r.paper_normalized, "g")]
                for r in sorted(rs, key=lambda r: (r.M, r.K))
            ],
            "top": top,
            "at": ", ".join(
                f"{r.variant} {r.normalized:.2f} (slowest/mean {r.imbalance:.2f})"
                for r in rs if (r.K, r.M) == (top.K, top.M)
            ),
        })  # fmt: skip
    return out


def _link(rows: Sequence[Any], main: Sequence[Any], names: dict[str, str], hw: str) -> list[Any]:
    out = []
    for mod, rs, variants in _by_model(rows):
        variants = [v for v in variants if v != "free link"]
        holds = [
            v for v in variants if all((r.vs_free or 0.0) >= LINK_OK for r in rs if r.variant == v)
        ]
        ours = []
        for r in sorted(
            (r for r in main if r.model == mod and r.hardware == hw and r.batch_mode == "fixed"
             and r.ratio),
            key=lambda r: r.K,
        ):  # fmt: skip
            if r.reference == f"K={r.K}, M={r.M}":
                continue
            free = next((q for q in rs if q.variant == "free link" and q.K == r.K), None)
            agree = (
                "contradicts" if abs((r.ratio or 1.0) - 1) > 0.10 else "agrees with (within 10%)"
            )
            ours.append((r, agree, free))
        out.append({
            "name": names.get(mod, mod), "M": rs[0].M,
            "cells": [
                [r.K, r.variant, _mib(r.boundary_bytes), f"{r.throughput:.4g}",
                 f"{r.normalized:.2f}", f"{r.vs_free:.3f}"]
                for r in sorted(rs, key=lambda r: r.K)
            ],
            "holds": holds, "fails": [v for v in variants if v not in holds],
            "worst": min(rs, key=lambda r: r.vs_free or 1.0), "ours": ours,
        })  # fmt: skip
    return out


def _efficiency(rows: Sequence[Any], names: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for mod, rs, where in _by_model(rows):
        sizes = sorted({r.micro_batch for r in rs})
        at = {(r.variant, r.micro_batch): r for r in rs}
        lo, hi = sizes[0], sizes[-1]
        out.append({
            "name": names.get(mod, mod),
            "head": ["micro-batch", *(f"{w}: {c}" for w in where for c in ("ms/sample", "efficiency"))],
            "cells": [
                [n, *(x for w in where for x in (
                    (f"{1e3 / at[w, n].throughput:.4g}", f"{at[w, n].normalized:.2f}")
                    if (w, n) in at else (DASH, DASH)))]
                for n in sizes
            ],
            "lo": lo, "hi": hi,
            "span": "; ".join(f"{w} {at[w, lo].normalized:.2f} → 1.00" for w in where if (w, lo) in at),
        })  # fmt: skip
    return out


def _extrapolation(rows: Sequence[Any], names: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for mod, rs, variants in _by_model(rows):
        at = {(r.variant, r.K, r.M): r for r in rs}
        keys = sorted({(r.M, r.K) for r in rs})
        M, K = keys[-1]
        out.append({
            "name": names.get(mod, mod),
            "head": ["M", "K", "micro-batch", *(f"{v}: normalised" for v in variants), "paper"],
            "cells": [
                [M, K, at[variants[0], K, M].micro_batch,
                 *(f"{at[v, K, M].normalized:.2f}" for v in variants),
                 num(at[variants[0], K, M].paper_normalized, "g")]
                for M, K in keys
            ],
            "M": M, "K": K, "variants": variants, "a": at[variants[0], K, M],
            "b": at[variants[1], K, M],
        })  # fmt: skip
    return out


def studies(rows: Sequence[Any], main: Sequence[Any], names: dict[str, str], hw: str) -> dict:
    """The simulator's studies (``throughput_sim``), each with the statements its rows support
    (empty: none ran)."""
    if not rows:
        return {}
    of = lambda study: [r for r in rows if r.study == study]  # noqa: E731
    return {
        "partition": _partition(of("partition"), names),
        "link": _link(of("link"), main, names, hw),
        "efficiency": _efficiency(of("efficiency"), names),
        "extrapolation": _extrapolation(of("extrapolation"), names),
    }


def markdown(
    rows: Sequence[Any],
    prov: Provenance,
    table: int,
    title: str,
    names: dict[str, str],
    ref: str,
    anchors: Anchoring | None = None,
    sims: Sequence[Any] = (),
    profile: str = "",
) -> str:
    """The page; ``anchors``: validate-hw's judgement of the published profiles, a mark beside
    every cell that rests on one not anchored well enough (None: not judged); ``sims``: the
    simulator's studies on ``profile``."""
    anchors = anchors or Anchoring()
    models = [
        _model([r for r in rows if r.model == m], table, names[m], anchors)
        for m in dict.fromkeys(r.model for r in rows)
    ]
    page = render(
        "throughput", prov, title, ref=ref, anchors=anchors, mark=MARK, models=models,
        studies=studies(sims, rows, names, profile), profile=profile, link_ok=LINK_OK,
    )  # fmt: skip
    return page.rstrip("\n") + "\n"


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
