"""The trainability tricks at depth (GPipe §5), the second sweep of ``make fig3``.

Experiment: ``gpipe-run -m experiment=fig3_tricks``: the deepest model trained here, T(16, 512, 4),
with and without the tricks (scaled feed-forward initialisation, clipped logits) on Fig. 3's data,
5 seeds. Rows: Fig. 3's (``paper.fig3``). Judged by ``paper.stats``, without against with: the largest
training loss after update 5 (the spike the paper's tricks prevent), the test NLL and BLEU averaged
over the languages; a run that diverged counts against its side. Render: ``fig3_tricks.md``,
``fig3_tricks.png`` (dev NLL against updates).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .artefact import SweepArtefact
from .fig3 import SKIP, Fig3Row, _curve, _key, _models, collect, label, of
from .plot import figure
from .provenance import Provenance
from .runs import failures, wall_time
from .stats import RULE, compare, sample
from .template import render


def summary(rows: Sequence[Fig3Row]) -> dict[str, Any]:
    """What the page says: with against without the tricks on the loss spike, the test NLL and
    BLEU (``pair`` False: not one model with and without them)."""
    on = next((m for m in _models(rows) if m[3]), None)
    off = next((m for m in _models(rows) if not m[3]), None)
    jobs = {r.job: r for r in rows}.values()
    out: dict[str, Any] = {"wall": wall_time((r.started, r.ended) for r in rows), "pair": False}
    if on is None or off is None or on[:3] != off[:3]:
        return out
    spikes = [
        sample([r.max_train_loss for r in jobs if _key(r) == m and r.status == "ok"])
        for m in (on, off)
    ]
    cells = []
    for m, spike in zip((on, off), spikes):
        mine = [r for r in jobs if _key(r) == m]
        cells.append(
            ["with" if m[3] else "without", len(mine), sum(r.status == "diverged" for r in mine),
             spike.text(), of(rows, m, "all", "nll").text(3), of(rows, m, "all").text()]
        )  # fmt: skip
    judged = [
        (f"largest training loss after update {SKIP} (without - with)", spikes[0], spikes[1]),
        ("test NLL (without - with)", of(rows, on, "all", "nll"), of(rows, off, "all", "nll")),
        ("test BLEU (with - without)", of(rows, off, "all"), of(rows, on, "all")),
    ]
    results = [(what, compare(a, b)) for what, a, b in judged]
    needed = any(c.beyond and c.delta > 0 for _, c in results) or any(
        r.status == "diverged" and not r.tricks for r in jobs
    )
    failed = failures((r.job, r.status, r.error) for r in rows)
    return {**out, "pair": True, "model": label(on), "skip": SKIP, "cells": cells,
            "results": results, "needed": needed, "rule": RULE, "failed": failed}  # fmt: skip


def tricks_markdown(rows: Sequence[Fig3Row], prov: Provenance) -> str:
    """The tricks' page: with against without, on the loss spike, the test NLL and BLEU."""
    title = "The trainability tricks at depth (GPipe §5)"
    return render("fig3_tricks", prov, title, **summary(rows))


def tricks_plot(rows: Sequence[Fig3Row], path: Path) -> None:
    with figure(path, 1, 1, figsize=(6, 4)) as (fig, ax):
        for i, m in enumerate(_models(rows)):
            pts = _curve(rows, m, None, "nll")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=label(m))
        ax.set(xlabel="updates", ylabel="dev NLL (mean over languages and seeds)",
               title="the tricks at depth: dev NLL against updates")  # fmt: skip
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)


ARTEFACT = SweepArtefact(
    "fig3_tricks",
    Fig3Row,
    "Fig. 3's tricks: the deepest model here with and without the trainability tricks (GPipe §5).",
    collect,
    tricks_markdown,
    tricks_plot,
)
