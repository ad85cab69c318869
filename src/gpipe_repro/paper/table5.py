"""Table 5 (GPipe §5): BLEU and NLL against the batch size in tokens, token-matched and same-updates.

Experiment: ``gpipe-run -m experiment=table5`` (``conf/experiment/table5.yaml``): per seed three runs
of M micro-batches of the same size, M = 1, 2, 4, for 4U, 2U and U updates: the same tokens seen.
Collect: ``paper.table5_rows`` (every job's end and its learning curve as rows). Two series, each
mean ± sd over seeds per batch size:

- **same updates** (the paper's design: every run at update U, the largest batch's last update, read
  from the dev curves): the paper's claim is judged here, on its own design;
- **token-matched** (the runs at their ends, the same tokens seen): the confound of that design — a
  bigger batch at the same updates has also seen more data —, judged apart.

Each step of a trend is judged by ``paper.stats`` (the effect in question: the paper's relative
change between the same two rows, applied to our mean), each series' verdict by
``verdict.seeded`` — the same rule as the scorecard's (``paper.claims.translation``). The sweep's
wall time is measured from the jobs' files (first job start to last job end). Render: ``table5.md``, ``table5.png`` (the series and
the dev-NLL learning curves against tokens and updates). Ours are measured; the paper's are quoted
(``studies.published``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..studies.published import quote, rows
from . import runs
from .artefact import SweepArtefact
from .claims import LEAD, answers
from .plot import figure
from .provenance import Provenance
from .runs import failures
from .stats import RULE, Comparison, Sample, compare, sample, trend
from .table5_rows import DEV, END, Table5Row, collect
from .template import render
from .verdict import seeded

PAPER = rows(5)  # the paper's batch sizes, "260K", "1M", "4M"


def updates(rows: Sequence[Table5Row]) -> int | None:
    """U: the updates of the largest batch's run (the paper's design reads every run there)."""
    ends = [r for r in rows if r.split == END and r.batch_tokens]
    return max(ends, key=lambda r: (r.batch_tokens, -(r.step or 0))).step if ends else None


@dataclass
class Point:
    """One batch size in one series, over seeds."""

    batch_tokens: int
    rows: list[Table5Row]

    def of(self, metric: str) -> Sample:
        return sample([getattr(r, metric) for r in self.rows])


def series(rows: Sequence[Table5Row], same_updates: bool) -> list[Point]:
    """Token-matched: each run's end (test). Same updates: each run's dev curve point at update U."""
    U = updates(rows)
    pick = [
        r
        for r in rows
        if r.status == "ok" and (r.split == DEV and r.step == U if same_updates else r.split == END)
    ]
    sizes = sorted({r.batch_tokens for r in pick if r.batch_tokens})
    return [Point(b, [r for r in pick if r.batch_tokens == b]) for b in sizes]


def paper_row(rank: int) -> str | None:
    """The paper's row for our ``rank``-th batch size (smallest = 260K)."""
    return PAPER[rank] if rank < len(PAPER) else None


METRICS = (("bleu", "BLEU", True), ("nll", "NLL", False))  # (row field, name, higher is better)


def _effects(points: Sequence[Point], metric: str, name: str) -> list[float | None]:
    """Each step's effect in question: the paper's relative step between the same rows, applied
    to our mean."""
    paper = [paper_row(i) for i in range(len(points))]
    return [
        None if a is None or b is None else _paper_step(a, b, name) * p.of(metric).mean
        for a, b, p in zip(paper, paper[1:], points)
    ]


def trends(points: Sequence[Point]) -> list[tuple[str, str, bool | None]]:
    """Per metric (BLEU, NLL): the trend over the batch sizes in one sentence and its verdict
    (``stats.trend``), each step against the paper's relative step between the same rows."""
    labels = [f"{p.batch_tokens:,}" for p in points]
    out = []
    for metric, name, higher in METRICS:
        effects = _effects(points, metric, name)
        text, ok = trend([p.of(metric) for p in points], labels, name, higher, effects)
        out.append((name, text, ok))
    return out


def comparisons(points: Sequence[Point]) -> list[tuple[Comparison, int]]:
    """Every step of both trends as ``paper.stats`` compares it (the same as ``trends``), with the
    sign the paper's claim expects of its difference (+1: BLEU rises, -1: NLL falls)."""
    out = []
    for metric, name, higher in METRICS:
        effects = _effects(points, metric, name)
        for a, b, e in zip(points, points[1:], effects):
            out.append((compare(a.of(metric), b.of(metric), e), 1 if higher else -1))
    return out


def _paper_step(a: str, b: str, column: str) -> float:
    pa, pb = quote(5, a, column).value, quote(5, b, column).value
    return (pb - pa) / pa


def summary(rows: Sequence[Table5Row]) -> dict[str, Any]:
    """What the page says: both series (their points and trends), the paper's rows, the runs'
    settings and wall time, failures."""
    ok = [r for r in rows if r.status == "ok" and r.split == END]
    jobs = {r.job: r for r in rows}.values()
    series_of = {k: series(rows, same) for k, same in (("matched", False), ("same", True))}
    return {
        "wall": runs.wall_time((r.started, r.ended) for r in jobs),
        "train_s": sum(r.train_s or 0.0 for r in jobs),
        "same_config": {c: sorted({str(getattr(r, c)) for r in ok})
                        for c in ("model", "corpus", "lr")},
        "updates": updates(rows),
        **{k: {"points": ps, "trends": trends(ps), "verdict": seeded(comparisons(ps))}
           for k, ps in series_of.items()},
        "paper": [(row, quote(5, row, "BLEU").value, quote(5, row, "NLL").value) for row in PAPER],
        "rule": RULE,
        "failed": failures((r.job, r.status, r.error) for r in rows),
        "signatures": sorted({r.bleu_signature for r in ok if r.bleu_signature}),
    }  # fmt: skip


def markdown(rows: Sequence[Table5Row], prov: Provenance, out: Path) -> str:
    title = "Table 5 — batch size (tokens) vs BLEU and NLL"
    return render("table5", prov, title, answers("table5", out), LEAD, **summary(rows))


def curves(rows: Sequence[Table5Row]) -> dict[int, list[tuple[int, float, float]]]:
    """Per batch size: (update, tokens seen, dev NLL), each a mean over seeds, at each update."""
    out: dict[int, list[tuple[int, float, float]]] = {}
    dev = [r for r in rows if r.status == "ok" and r.split == DEV and r.nll is not None]
    for b in sorted({r.batch_tokens for r in dev if r.batch_tokens}):
        for s in sorted({r.step for r in dev if r.batch_tokens == b and r.step is not None}):
            at = [r for r in dev if r.batch_tokens == b and r.step == s]
            tokens = sample([r.tokens for r in at]).mean
            out.setdefault(b, []).append((s, tokens, sample([r.nll for r in at]).mean))
    return out


def plot(rows: Sequence[Table5Row], path: Path) -> None:
    with figure(path, 2, 2, figsize=(11, 8)) as (fig, axes):
        for b, pts in curves(rows).items():
            for ax, x in ((axes[0][0], 1), (axes[0][1], 0)):
                ax.plot([p[x] for p in pts], [p[2] for p in pts], "o-", ms=3, label=f"{b:,} tokens")
        axes[0][0].set(xlabel="target tokens seen", title="dev NLL against tokens seen")
        axes[0][1].set(xlabel="updates", title="dev NLL against updates")
        for ax, (key, name) in zip(axes[1], (("bleu", "BLEU"), ("nll", "NLL per target token"))):
            for same, what in ((False, "token-matched (test)"), (True, "same updates (dev)")):
                ser = series(rows, same)
                st = [p.of(key) for p in ser]
                xs = [p.batch_tokens for p in ser]
                ax.errorbar(xs, [s.mean for s in st], yerr=[s.sd for s in st], fmt="o-",
                            capsize=4, label=what)  # fmt: skip
            ax.set(xscale="log", xlabel="batch (target tokens), grown through M", ylabel=name,
                   title=f"{name}, mean ± sd over seeds")  # fmt: skip
            ax.set_xticks(xs, [f"{x:,}" for x in xs])
            ax.minorticks_off()
        for ax in axes.flat:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        for ax in axes[0]:
            ax.set_ylabel("dev NLL per target token (mean over seeds)")
        fig.suptitle("Table 5, ours (measured): batch size, data seen and quality")


ARTEFACT = SweepArtefact(
    "table5",
    Table5Row,
    "Table 5: BLEU and NLL against the batch size in tokens, token-matched and same-updates (GPipe §5).",
    collect,
    markdown,
    plot,
)
