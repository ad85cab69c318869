"""What the page of Table 2 or 3 says, from its rows (``paper.throughput`` builds them), and its plot.

Per model: the paper beside every series of the paper's design, all under the paper's normalisation
(``throughput_norm``), then one table per series; other designs (a fixed batch, the planner's pick)
follow as studies, then the simulator's studies (``studies.sensitivity``);
``templates/throughput.md.j2`` words them. The plot draws every series against K beside the paper
and the bubble bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..engine.schedule import bubble_fraction
from ..studies.published import throughput
from .plot import figure
from .provenance import Provenance
from .template import render, words
from .throughput_norm import PAPER_REF, paper_design
from .validate_hw.flags import MARK, Anchoring
from .verdict import LINK_OK, TOLERANCE, within


def label(r: Any) -> str:
    """What a series is: where its numbers come from, in words, and its batch
    (``templates/throughput_lines.md.j2``)."""
    return words("throughput_lines", "label", r=r)


def _grid(rows: Sequence[Any], labels: Sequence[str], table: int) -> dict[str, Any]:
    """The paper's cells beside each series of ``labels`` (the template's ``grid``): the paper's
    numbers, their (K, M) by M then K, and each series' first row per cell, as the page reads."""
    paper = throughput(table, rows[0].model)
    return {
        "labels": labels,
        "paper": paper,
        "keys": sorted(paper, key=lambda km: (km[1], km[0])),
        "at": {(label(r), r.K, r.M): r for r in reversed(rows)},
    }


def _model(rows: Sequence[Any], table: int, name: str, anchors: Anchoring) -> dict[str, Any]:
    """One model's tables: the paper beside every series of its design, the normaliser of each,
    the footnotes of marked cells, each series' own table; then the studies' series (a fixed batch:
    the same grid; the planner's pick, one M per K: its own table alone)."""
    every = list(dict.fromkeys(label(r) for r in rows))
    main = [lb for lb in every if any(paper_design(r) for r in rows if label(r) == lb)]
    planner = list(dict.fromkeys(label(r) for r in rows if r.batch_mode == "planner"))
    fixed = [lb for lb in every if lb not in main and lb not in planner]
    simulated = dict.fromkeys((r.model, r.hardware) for r in rows if r.source == "simulated")

    def tables(lbs: Sequence[str]) -> list[tuple[str, list[str], list[Any]]]:
        """Per series: its label, the cells it is normalised to, its rows."""
        return [
            (lb, sorted({r.reference for r in rows if label(r) == lb and r.reference}),
             [r for r in rows if label(r) == lb])
            for lb in lbs
        ]  # fmt: skip

    return {
        "name": name,
        "grid": _grid(rows, main, table),
        "footnotes": [anchors.why[p] for p in simulated if p in anchors.why],
        "series": tables(main),
        "fixed": {"grid": _grid(rows, fixed, table), "series": tables(fixed)} if fixed else None,
        "planner": tables(planner),
    }


def _link(rs: Sequence[Any], variants: Sequence[str], main: Sequence[Any], hw: str) -> dict:
    """What one model's link study supports: the links under which every K keeps ``LINK_OK`` of
    the free link's throughput and the others, the worst cell, and each of our cells on the
    profile's link at a fixed batch against the paper's (and the free link's at its K)."""
    links = [v for v in variants if v != "free link"]
    holds = [v for v in links if all((r.vs_free or 0.0) >= LINK_OK for r in rs if r.variant == v)]
    ours = [
        (r, within(r.normalized or 0, r.paper_normalized or 1),
         next((q for q in rs if q.variant == "free link" and q.K == r.K), None))
        for r in sorted(main, key=lambda r: r.K)
        if r.model == rs[0].model and r.hardware == hw and r.batch_mode == "fixed" and r.ratio
        and r.reference != f"K={r.K}, M={r.M}"
    ]  # fmt: skip
    return {"M": rs[0].M, "holds": holds, "fails": [v for v in links if v not in holds],
            "worst": min(rs, key=lambda r: r.vs_free or 1.0), "ours": ours}  # fmt: skip


def studies(rows: Sequence[Any], main: Sequence[Any], names: dict[str, str], hw: str) -> dict:
    """The simulator's studies (``sensitivity``), per study one entry per model: its name, rows,
    variants and (M, K) in order, its cells by (variant, K, M) and by (variant, micro-batch); the
    link's with the statements its rows support (empty: none ran)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for study in ("partition", "link", "efficiency", "extrapolation") if rows else ():
        out[study] = []
        for mod in dict.fromkeys(r.model for r in rows if r.study == study):
            rs = [r for r in rows if r.study == study and r.model == mod]
            variants = list(dict.fromkeys(r.variant for r in rs))
            out[study].append({
                "name": names.get(mod, mod), "rows": rs, "variants": variants,
                "keys": sorted({(r.M, r.K) for r in rs}), "at": {(r.variant, r.K, r.M): r for r in rs},
                "by_size": {(r.variant, r.micro_batch): r for r in rs},
                **(_link(rs, variants, main, hw) if study == "link" else {}),
            })  # fmt: skip
    return out


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
    answers: Sequence[Any] = (),
    lead: str = "",
) -> str:
    """The page; ``anchors``: validate-hw's judgement of the published profiles, a mark beside
    every cell that rests on one not anchored well enough (None: not judged); ``sims``: the
    simulator's studies on ``profile``; ``answers``: the verdicts it opens with."""
    anchors = anchors or Anchoring()
    models = [
        _model([r for r in rows if r.model == m], table, names[m], anchors)
        for m in dict.fromkeys(r.model for r in rows)
    ]
    page = render(
        "throughput", prov, title, answers, lead, ref=ref, anchors=anchors, mark=MARK, models=models,
        studies=studies(sims, rows, names, profile), profile=profile, link_ok=LINK_OK,
        tolerance=TOLERANCE, paper_ref="K={}, M={}".format(*PAPER_REF[table]),
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
                ours = [
                    r for r in rows if r.model == model and r.M == M and r.normalized is not None
                ]
                for lb in dict.fromkeys(label(r) for r in rows if r.model == model):
                    if rs := sorted((r for r in ours if label(r) == lb), key=lambda r: r.K):
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
